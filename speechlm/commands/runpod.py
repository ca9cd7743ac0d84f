"""Train on a rented GPU: size it, create the pod, sync the code, train in tmux, follow it.

    speechlm runpod plan [--config C] [-e E] [key=value ...]
    speechlm runpod up [--config C] [-e E] [--gpu-type ID] [--dry-run] [key=value ...]
    speechlm runpod wait POD
    speechlm runpod deploy HOST PORT [--skip-setup] [--skip-deps]
    speechlm runpod train HOST PORT --config C [-e E] [--no-attach] [key=value ...]
    speechlm runpod attach HOST PORT [--logs] [--lines N]
    speechlm runpod checkpoint HOST PORT
    speechlm runpod down POD [--stop] [--dry-run]

(`python launch/runpod.py ...` runs the same commands from a checkout.)

Secrets (HF_TOKEN, HUGGING_FACE_HUB_TOKEN, WANDB_API_KEY) travel from this shell's environment to the
remote tmux session through ssh's stdin: never on a command line, never in a file, never printed.
The tmux session runs on its own socket (-L speechlm), started by the shell that received them, so
its global environment (and so the training process's) holds them.
"""

from __future__ import annotations

import argparse
import sys

from speechlm.config import cli_errors

# the arguments are here; the commands are speechlm.runpod's pod.py (the pod, through runpodctl) and
# host.py (its host, over SSH)
from speechlm.runpod import host, pod
from speechlm.runpod.host import REMOTE_DIR
from speechlm.runpod.pod import DEFAULT_IMAGE

EXAMPLES = {
    None: """examples:
  speechlm runpod plan --config production          # memory, disk, the GPU to rent
  speechlm runpod up --dry-run                      # the runpodctl command, not run
  speechlm runpod up                                # creates the pod, prints its id
  speechlm runpod wait POD                          # prints HOST PORT
  speechlm runpod deploy HOST PORT && speechlm runpod train HOST PORT --config production
  speechlm runpod attach HOST PORT --logs; speechlm runpod checkpoint HOST PORT; speechlm runpod down POD""",
    "plan": "  speechlm runpod plan --config production training.per_device_train_batch_size=32",
    "up": "  speechlm runpod up --dry-run --gpu-type 'NVIDIA H100 80GB HBM3' --disk-gb 150",
    "wait": "  speechlm runpod wait abc123xyz                    # prints HOST PORT",
    "deploy": "  speechlm runpod deploy 1.2.3.4 22001 -i ~/.ssh/id_ed25519",
    "train": "  speechlm runpod train 1.2.3.4 22001 --config production --no-attach training.max_steps=2000",
    "attach": "  speechlm runpod attach 1.2.3.4 22001 --logs --lines 50",
    "checkpoint": "  speechlm runpod checkpoint 1.2.3.4 22001",
    "down": "  speechlm runpod down abc123xyz --stop",
}


def _ssh_options() -> argparse.ArgumentParser:
    """The options of every command that works on a pod's host over SSH."""
    conn = argparse.ArgumentParser(add_help=False)
    conn.add_argument("host")
    conn.add_argument("port", type=int)
    conn.add_argument("--user", default="root")
    conn.add_argument("--identity", "-i", default=None, help="ssh private key")
    conn.add_argument("--ssh-opt", action="append", default=[], help="extra ssh -o option (repeatable)")
    conn.add_argument("--remote-dir", default=REMOTE_DIR)
    conn.add_argument("--python", default=None, help="python on the host (default REMOTE_DIR/.venv/bin/python)")
    conn.add_argument("--session", default="speechlm", help="tmux session name")
    return conn


def _config_options() -> argparse.ArgumentParser:
    """The options of every command that reads the training config (as speechlm train takes them)."""
    cfg = argparse.ArgumentParser(add_help=False)
    cfg.add_argument("--config", default=None)
    cfg.add_argument("--experiment", "-e", default=None)
    cfg.add_argument("overrides", nargs="*", help="key.sub=value")
    return cfg


def parser(prog: str = "speechlm runpod") -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, epilog=EXAMPLES[None], formatter_class=raw)
    ap.set_defaults(prog=prog)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def command(name: str, help: str, parents=()) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            parents=list(parents),
            help=help,
            description=help,
            epilog="example:\n" + EXAMPLES[name],
            formatter_class=raw,
        )

    conn, cfg = _ssh_options(), _config_options()
    p = command("plan", "size GPU memory and disk", [cfg])
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--json", action="store_true")
    p = command("up", "create a pod sized by the plan", [cfg])
    p.add_argument("--name", default="speechlm")
    p.add_argument("--gpu-type", default=None, help="RunPod GPU id (default: the plan's recommendation)")
    p.add_argument("--gpu-count", type=int, default=1)
    p.add_argument("--image", default=DEFAULT_IMAGE)
    p.add_argument("--disk-gb", type=int, default=None)
    p.add_argument("--community", action="store_true")
    p.add_argument("--dry-run", action="store_true", help="print the runpodctl command instead of running it")
    p = command("wait", "wait for a pod's SSH endpoint; prints HOST PORT")
    p.add_argument("pod")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--interval", type=float, default=10)
    p = command("deploy", "sync the code and install dependencies", [conn])
    p.add_argument("--skip-setup", action="store_true", help="no apt packages")
    p.add_argument("--skip-deps", action="store_true", help="no venv / pip install")
    p = command("train", "start training in tmux and attach", [conn, cfg])
    p.add_argument("--gpus", type=int, default=None, help="processes on the pod (default: its GPU count)")
    p.add_argument("--no-attach", action="store_true")
    p.add_argument("--skip-disk-check", action="store_true")
    p = command("attach", "attach to the run (or print its log)", [conn])
    p.add_argument("--logs", action="store_true")
    p.add_argument("--lines", type=int, default=100)
    command("checkpoint", "path of the newest checkpoint", [conn])
    p = command("down", "terminate (or --stop) a pod")
    p.add_argument("pod")
    p.add_argument("--stop", action="store_true")
    p.add_argument("--dry-run", action="store_true")
    return ap


@cli_errors
def main(argv: list[str] | None = None, prog: str = "speechlm runpod") -> int:
    ap = parser(prog)
    a, extra = ap.parse_known_args(argv)
    # key=value overrides may follow options (train HOST PORT --config C k=v): collect them too
    bad = [x for x in extra if x.startswith("-") or "=" not in x or not hasattr(a, "overrides")]
    if bad:
        ap.error(f"unrecognized arguments: {' '.join(bad)}")
    if extra:
        a.overrides = list(a.overrides) + extra
    return {
        "plan": pod.cmd_plan,
        "up": pod.cmd_up,
        "wait": pod.cmd_wait,
        "deploy": host.cmd_deploy,
        "train": host.cmd_train,
        "attach": host.cmd_attach,
        "checkpoint": host.cmd_checkpoint,
        "down": pod.cmd_down,
    }[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main(prog="python -m speechlm.runpod"))
