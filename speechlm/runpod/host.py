"""The pod's host over SSH: sync the code and install it (deploy), train in tmux, attach or read the
log, find the newest checkpoint. Scripts reach the host through ssh's stdin, so the secrets they
export (SECRETS, from this shell's environment) are never on a command line, in a file or printed."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

from speechlm.config import REPO_ROOT, ConfigError

SECRETS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY")
SOCKET = "speechlm"  # tmux -L socket name
REMOTE_DIR = "/workspace/speechlm"


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
