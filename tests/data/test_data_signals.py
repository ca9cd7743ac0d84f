"""DataLoader workers survive the stop signals that Slurm and `kill -- -PGID` send to every process
of a job: the trainer, not a worker, decides when to stop (after its pre-emption checkpoint)."""

from __future__ import annotations

import multiprocessing
import os
import signal

from data_helpers import all_ids, ids_collate, write_set
from paths import TESTS
from speechlm.config import DataSet
from speechlm.data import TrainLoader


def test_workers_ignore_sigterm_and_sigusr1(tmp_path):
    path = write_set(tmp_path, "a", [6] * 4)
    loader = TrainLoader([DataSet(str(path))], ids_collate, batch_size=2, num_workers=2, seed=3)
    ids, signalled = [], 0
    for batch in loader:
        ids.extend(batch["ids"])
        # after the second batch: batches come from the workers in turn, so both have started and run
        # their init (which sets the signals aside); a worker still starting dies of SIGTERM as any process
        if not signalled and len(ids) >= 4:
            for child in multiprocessing.active_children():  # the DataLoader's worker processes
                os.kill(child.pid, signal.SIGTERM)
                os.kill(child.pid, signal.SIGUSR1)
                signalled += 1
    assert signalled == 2
    assert sorted(ids) == sorted(all_ids(path))  # the epoch finished: no worker died of the signals


def test_an_exception_with_workers_running_still_exits(tmp_path):
    """Workers that ignore SIGTERM must not hang the exit: multiprocessing's exit handler would
    terminate() and join() them forever while an exception's traceback keeps the loader alive."""
    import subprocess
    import sys

    path = write_set(tmp_path, "a", [6] * 4)
    script = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from speechlm.config import DataSet
from speechlm.data import TrainLoader
from data_helpers import ids_collate
loader = TrainLoader([DataSet({str(path)!r})], ids_collate, batch_size=2, num_workers=2, seed=3)
batches = iter(loader)
next(batches)
raise SystemExit("stopped with the workers running")
"""
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "stopped with the workers running" in p.stderr, p.stderr[-2000:]
