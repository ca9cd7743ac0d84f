"""Run `launch/train.py` as a real child process and hit it with real faults (signals, OS limits)."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

from speechlm.config import REPO_ROOT

WATCHDOG_S = 600  # any wait longer than this is a hang: the test fails instead of waiting forever


class Train:
    def __init__(
        self, run_dir: Path, overrides: list[str], log: Path, env: dict | None = None, fsize_limit: int | None = None
    ):
        self.run_dir, self.log = run_dir, log
        full_env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            **(env or {}),
        }

        def limits():  # in the child: a real per-file size limit (EFBIG), as a full disk would give
            if fsize_limit is not None:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_limit, fsize_limit))

        metrics = run_dir / "metrics.jsonl"
        self.offset = metrics.stat().st_size if metrics.is_file() else 0  # rows this process logs come after
        self.out = open(log, "w")
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(
            [sys.executable, "launch/train.py", "--config", "tiny", *overrides],
            cwd=REPO_ROOT,
            env=full_env,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            preexec_fn=limits,
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def steps_logged(self) -> int:
        path = self.run_dir / "metrics.jsonl"
        if not path.is_file():
            return 0
        with open(path, "rb") as f:
            f.seek(self.offset)
            rows = f.read().decode(errors="replace").splitlines()
        steps = [json.loads(x).get("step", 0) for x in rows if x.strip().endswith("}")]
        return max([s for s in steps if isinstance(s, int)] or [0])

    def wait_for(self, cond, what: str, poll: float = 0.05) -> None:
        deadline = time.monotonic() + WATCHDOG_S
        while not cond():
            if self.p.poll() is not None:
                raise AssertionError(f"trainer exited ({self.p.returncode}) before {what}:\n{self.text()[-3000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"watchdog: no {what} in {WATCHDOG_S} s:\n{self.text()[-3000:]}")
            time.sleep(poll)

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.p.poll() is None:
            self.p.send_signal(sig)

    def wait(self, timeout: float = WATCHDOG_S) -> int:
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"watchdog: trainer still running after {timeout} s:\n{self.text()[-3000:]}")  # noqa: B904
        finally:
            self.out.close()
