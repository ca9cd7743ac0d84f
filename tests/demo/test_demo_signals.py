"""A demo stopped by a signal stops its trainer too (speechlm.demo.stages.run_forwarding): the trainer
runs in its own process, and a `kill` of the demo alone once left it training on, orphaned, holding the
machine's cores for the rest of its run."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

# a stand-in for the trainer: on SIGTERM it writes what it got and exits 128 + the signal, as the
# trainer does after its pre-emption checkpoint (speechlm.train.signals)
CHILD = """
import signal, sys, time
def stop(signum, _):
    open(sys.argv[1], "w").write(str(signum)); sys.exit(128 + signum)
signal.signal(signal.SIGTERM, stop)
open(sys.argv[1] + ".up", "w").close()
time.sleep(60)
"""

PARENT = """
import os, sys
from speechlm.demo.stages import run_forwarding
sys.exit(run_forwarding([sys.executable, "-c", sys.argv[1], sys.argv[2]], dict(os.environ)))
"""


def test_sigterm_to_the_demo_reaches_its_trainer(tmp_path: Path):
    marker = tmp_path / "got"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, str(marker)])
    deadline = time.monotonic() + 60
    while not (tmp_path / "got.up").exists():
        assert time.monotonic() < deadline and parent.poll() is None, "the trainer stand-in never started"
        time.sleep(0.05)
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=30) == 128 + signal.SIGTERM  # the trainer's status, passed through
    assert marker.read_text() == str(int(signal.SIGTERM))  # the trainer got the signal, not an orphan's fate
