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
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from speechlm.config import REPO_ROOT, Config, ConfigError, cli_errors, load

SECRETS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY")
SOCKET = "speechlm"  # tmux -L socket name
DEFAULT_IMAGE = "runpod/pytorch:2.8.0-py3.11-cuda12.8.1-cudnn-devel-ubuntu22.04"
REMOTE_DIR = "/workspace/speechlm"


# --------------------------------------------------------------------------- ssh


def ssh_base(a, tty: bool = False) -> list[str]:
    cmd = ["ssh", "-p", str(a.port), "-o", "StrictHostKeyChecking=accept-new", "-o", "ConnectTimeout=20"]
    cmd += ["-t"] if tty else ["-o", "BatchMode=yes"]
    if a.identity:
        cmd += ["-i", a.identity]
    for o in a.ssh_opt:
        cmd += ["-o", o]
    return cmd + [f"{a.user}@{a.host}"]


def remote(
    a, script: str, *, tty: bool = False, capture: bool = False, check: bool = True
) -> subprocess.CompletedProcess:
    """Run a bash script on the host; the script goes through stdin (secrets stay off argv)."""
    if tty:  # an interactive attach: the command itself must hold no secret
        return subprocess.run(ssh_base(a, tty=True) + [script], check=check)
    r = subprocess.run(ssh_base(a) + ["bash -s"], input=script, text=True, capture_output=capture)
    if check and r.returncode != 0:
        err = (r.stderr or "").strip().splitlines()[-1:] if capture else []
        raise SystemExit(
            f"error: remote step failed on {a.host}:{a.port} (exit {r.returncode}){': ' + err[0] if err else ''}"
        )
    return r


def q(s) -> str:
    return shlex.quote(str(s))


# --------------------------------------------------------------------------- commands


def cmd_plan(a) -> int:
    from speechlm.plan import make_plan, recommend, report  # torch: the pod commands start without it

    plan = make_plan(load(Config, a.config, a.experiment, a.overrides), world=a.world_size)
    print(json.dumps(plan, indent=1) if a.json else report(plan))
    rec = recommend(plan)
    if rec and not a.json:
        disk_gb = plan["disk_bytes"]["total"] / 1e9
        print(
            f"\nrecommended: {rec['gpu']} ('{rec['runpod_id']}'), container disk >= {disk_gb * 1.2:.0f} GB (plan + 20%)"
        )
    return 0


def up_command(a) -> list[str]:
    from speechlm.plan import make_plan, recommend  # torch: the pod commands start without it

    plan = make_plan(load(Config, a.config, a.experiment, a.overrides), world=a.gpu_count)
    rec = recommend(plan)
    gpu = a.gpu_type or (rec and rec["runpod_id"])
    if not gpu:
        raise ConfigError("no GPU in the catalog fits this config; pass --gpu-type or lower the batch")
    disk_gb = a.disk_gb or int(plan["disk_bytes"]["total"] / 1e9 * 1.2) + 10
    return [
        "runpodctl",
        "create",
        "pod",
        "--name",
        a.name,
        "--gpuType",
        gpu,
        "--gpuCount",
        str(a.gpu_count),
        "--imageName",
        a.image,
        "--containerDiskSize",
        str(disk_gb),
        "--volumeSize",
        "0",
        "--ports",
        "22/tcp",
        "--secureCloud" if not a.community else "--communityCloud",
    ]


def cmd_up(a) -> int:
    cmd = up_command(a)
    if a.dry_run:
        print(shlex.join(cmd))
        return 0
    r = subprocess.run(cmd, text=True, capture_output=True)
    print(r.stdout.strip())
    if r.returncode:
        raise SystemExit(f"error: runpodctl failed: {r.stderr.strip()}")
    pod = re.search(r'pod "?([a-z0-9]+)"? created', r.stdout)
    if pod:
        print(f"next: {a.prog} wait {pod.group(1)}")
    return 0


SSH_PORT = re.compile(r"(\d+\.\d+\.\d+\.\d+):(\d+)->22\b")


def cmd_wait(a) -> int:
    deadline = time.time() + a.timeout
    while time.time() < deadline:
        r = subprocess.run(["runpodctl", "get", "pod", a.pod, "--allfields"], text=True, capture_output=True)
        if r.returncode:
            raise SystemExit(f"error: runpodctl get pod {a.pod}: {r.stderr.strip()}")
        m = SSH_PORT.search(r.stdout)
        if m:
            print(f"{m.group(1)} {m.group(2)}")
            print(f"next: {a.prog} deploy {m.group(1)} {m.group(2)}", file=sys.stderr)
            return 0
        time.sleep(a.interval)
    raise SystemExit(f"error: pod {a.pod} exposed no SSH port within {a.timeout} s")


def checkout() -> Path:
    """The checkout this package runs from (an editable install or PYTHONPATH): what deploy syncs."""
    if not (REPO_ROOT / "launch" / "torchrun.sh").is_file():
        raise ConfigError(f"{REPO_ROOT} is not a speechlm checkout: deploy syncs one (install with `pip install -e .`)")
    return REPO_ROOT


def synced_files() -> list[str]:
    """Files git tracks (or sees and doesn't ignore) that exist: the code, never outputs or venvs."""
    root = checkout()
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted({f for f in out.split("\0") if f and (root / f).is_file()})


def cmd_deploy(a) -> int:
    if not a.skip_setup:  # the RunPod PyTorch image lacks tmux and rsync
        remote(
            a,
            "set -e; command -v tmux >/dev/null && command -v rsync >/dev/null || "
            "(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux rsync >/dev/null)",
        )
    remote(a, f"mkdir -p {q(a.remote_dir)}")
    rsh = shlex.join(ssh_base(a)[:-1])
    files = "\0".join(synced_files()) + "\0"
    r = subprocess.run(
        ["rsync", "-az", "--from0", "--files-from=-", "-e", rsh, "./", f"{a.user}@{a.host}:{a.remote_dir}/"],
        cwd=checkout(),
        input=files.encode(),
    )
    if r.returncode:
        raise SystemExit(f"error: rsync to {a.host}:{a.port} failed (exit {r.returncode})")
    print(f"synced {files.count(chr(0))} files to {a.host}:{a.remote_dir}")
    if not a.skip_deps:
        # a venv that sees the image's CUDA torch, so pip keeps it instead of pulling a CPU wheel
        remote(a, deps_script(a.remote_dir))
    return 0


def deps_script(remote_dir: str) -> str:
    """The pod's venv, the project, and on CUDA the [gpu] extra's kernels one at a time (a kernel
    that fails to install is reported and the deploy goes on)."""
    return (
        f"set -e; cd {q(remote_dir)}; test -x .venv/bin/python || python3 -m venv --system-site-packages .venv; "
        ".venv/bin/python -m pip install -q --upgrade pip; .venv/bin/python -m pip install -q -e '.[dev]'; "
        "bash launch/install_gpu_kernels.sh .venv/bin/python; "
        '.venv/bin/python -c \'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())\''
    )


def remote_python(a) -> str:
    return a.python or f"{a.remote_dir}/.venv/bin/python"


def check_disk(a, train_args: list[str]) -> None:
    """Refuse to start when the pod's free disk is below what the plan needs still to come."""
    script = (
        f"cd {q(a.remote_dir)} && {q(remote_python(a))} -m speechlm.plan --json {shlex.join(train_args)} && "
        f"df -B1 --output=avail {q(a.remote_dir)} | tail -1"
    )
    r = remote(a, script, capture=True, check=False)
    if r.returncode:
        raise SystemExit(f"error: planning on the pod failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    plan_json, _, free = r.stdout.strip().rpartition("\n")
    need = json.loads(plan_json)["disk_bytes"]
    need_now = need["shards"] + need["hub_cache"] + need["checkpoints"]  # the environment is installed
    if int(free) < need_now:
        raise SystemExit(
            f"error: {a.host} has {int(free) / 1e9:.1f} GB free, the plan needs {need_now / 1e9:.1f} GB "
            "(shards + Hub cache + checkpoints); grow the disk or pass --skip-disk-check"
        )
    print(f"disk: {int(free) / 1e9:.1f} GB free, plan needs {need_now / 1e9:.1f} GB")


def cmd_train(a) -> int:
    train_args = (
        (["--config", a.config] if a.config else [])
        + (["--experiment", a.experiment] if a.experiment else [])
        + a.overrides
    )
    if not a.skip_disk_check:
        check_disk(a, train_args)
    env = "".join(f"export {k}={q(os.environ[k])}\n" for k in SECRETS if os.environ.get(k))
    nproc = a.gpus or "$(nvidia-smi -L 2>/dev/null | wc -l | awk '{print ($1 > 0) ? $1 : 1}')"
    log = f"{a.remote_dir}/logs/{a.session}.log"
    run = (
        f"cd {q(a.remote_dir)} && PYTHON={q(remote_python(a))} NPROC_PER_NODE={nproc} bash launch/torchrun.sh "
        f'{shlex.join(train_args)} 2>&1 | tee -a {q(log)}; echo "[speechlm] training exited" | tee -a {q(log)}'
    )
    script = (
        f"set -e\nmkdir -p {q(a.remote_dir)}/logs\n"
        f"if tmux -L {SOCKET} has-session -t {q(a.session)} 2>/dev/null; then "
        f"echo 'a run is already in tmux session {a.session}: attach, or end it first' >&2; exit 3; fi\n"
        f"tmux -L {SOCKET} kill-server 2>/dev/null || true\n"  # a fresh server inherits this env
        f"{env}export HF_HUB_ENABLE_HF_TRANSFER=${{HF_HUB_ENABLE_HF_TRANSFER:-0}}\n"
        f"tmux -L {SOCKET} new-session -d -s {q(a.session)} -x 200 -y 50 bash -lc {q(run)}\n"
        f"echo started {a.session}\n"
    )
    r = remote(a, script, capture=True, check=False)
    if r.returncode:
        raise SystemExit(f"error: could not start training: {r.stderr.strip()}")
    print(r.stdout.strip() + f"; logs: {log}")
    if not a.no_attach:
        return cmd_attach(a)
    return 0


def cmd_attach(a) -> int:
    if getattr(a, "logs", False):
        r = remote(a, f"tail -n {int(a.lines)} {q(a.remote_dir)}/logs/{q(a.session)}.log", capture=True, check=False)
        if r.returncode:
            raise SystemExit(f"error: no logs for session {a.session} on {a.host}: {r.stderr.strip()}")
        print(r.stdout, end="")
        return 0
    return remote(a, f"tmux -L {SOCKET} attach -t {q(a.session)}", tty=True, check=False).returncode


def cmd_checkpoint(a) -> int:
    # `latest` is written only after a save completes; take the newest run's
    script = (
        f"cd {q(a.remote_dir)} && for l in $(ls -td outputs/*/checkpoints/latest 2>/dev/null); do "
        'if [ -L "$l" ]; then readlink -f "$l"; else d=$(dirname "$l"); t=$(cat "$l"); '
        'case "$t" in /*) echo "$t";; *) echo "$(cd "$d" && pwd)/$t";; esac; fi; break; done'
    )
    out = remote(a, script, capture=True).stdout.strip()
    if not out:
        raise SystemExit(f"error: no checkpoint yet under {a.remote_dir}/outputs on {a.host}")
    print(out)
    return 0


def cmd_down(a) -> int:
    cmd = ["runpodctl", "stop" if a.stop else "remove", "pod", a.pod]
    if a.dry_run:
        print(shlex.join(cmd))
        return 0
    return subprocess.run(cmd).returncode


# --------------------------------------------------------------------------- CLI


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
        "plan": cmd_plan,
        "up": cmd_up,
        "wait": cmd_wait,
        "deploy": cmd_deploy,
        "train": cmd_train,
        "attach": cmd_attach,
        "checkpoint": cmd_checkpoint,
        "down": cmd_down,
    }[a.cmd](a)

