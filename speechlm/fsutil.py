"""Crash-safe file writes, shared by the shard writer and the checkpoints."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path


def fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write to a temporary name, fsync, rename: readers see the old file or the whole new one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


@contextlib.contextmanager
def locked_dir(d: Path):
    """An exclusive lock on folder `d` (flock on the folder itself: no lock file left behind),
    held until the block ends or the process dies; for processes that start together on one folder."""
    fd = os.open(d, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
