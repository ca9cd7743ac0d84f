"""Run Python where torch, transformers and peft import but speechlm does not (shared/README.md):
a bare virtualenv of the base interpreter, with this venv's site-packages on PYTHONPATH. The
editable install's `.pth` hook is not read from PYTHONPATH, and the script runs outside the repo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

PRELUDE = """\
try:
    import speechlm  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("speechlm is importable here: the check would prove nothing")
"""


def make_env(root: Path) -> Path:
    """The python of a fresh virtualenv without speechlm (no pip: nothing gets installed into it)."""
    venv = root / "venv-nospeechlm"
    if not (venv / "bin" / "python").exists():
        base = Path(sys.base_prefix) / "bin" / "python3"
        subprocess.run([str(base), "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv / "bin" / "python"


def run(python: Path, script: str, *args: str, cwd: Path, timeout: int = 600) -> dict:
    """Run `script` (its last stdout line is JSON) in that environment; returns the parsed JSON."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        PYTHONPATH=sysconfig.get_paths()["purelib"],
        HF_HUB_OFFLINE="1",
        HF_MODULES_CACHE=str(cwd / "hf_modules"),
        PYTHONNOUSERSITE="1",
    )
    cwd = Path(cwd) / "nospeechlm-run"  # its own folder: nothing beside the script named like a package
    cwd.mkdir(exist_ok=True)
    path = cwd / "script.py"
    path.write_text(PRELUDE + script)
    proc = subprocess.run(
        [str(python), str(path), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise AssertionError(f"script failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
