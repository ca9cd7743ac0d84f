"""`python -m speechlm.shard` as a user runs it, in a child process (the CLI and scale tests share it)."""

from __future__ import annotations

import os
import subprocess
import sys

from speechlm.config import REPO_ROOT


def run_cli(*args, cwd=REPO_ROOT, **popen) -> subprocess.Popen:
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return subprocess.Popen(
        [sys.executable, "-m", "speechlm.shard", *map(str, args)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )
