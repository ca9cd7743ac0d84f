"""What the test daemons (sshd, munged, slurmctld, slurmd) share: a free port, waiting for one to
come up (with its log in the error), and stopping one by its process, even after a failure."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(
    ok, timeout: float, what: str, log: Path, proc: subprocess.Popen | None = None, poll: float = 0.1
) -> None:
    deadline = time.time() + timeout
    while not ok():
        if (proc is not None and proc.poll() is not None) or time.time() > deadline:
            tail = log.read_text()[-2000:] if log.is_file() else "(no log)"
            raise RuntimeError(f"{what} did not come up within {timeout:.0f} s: {tail}")
        time.sleep(poll)


def stop(proc: subprocess.Popen, timeout: float) -> None:
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
