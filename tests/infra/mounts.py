"""Small filesystems for fault tests: a size-limited tmpfs in a private mount namespace (`unshare -m`),
so a test can fill a disk or /dev/shm for its child processes alone."""

from __future__ import annotations

import subprocess


def private_tmpfs_works() -> bool:
    """Whether `unshare -m` may mount a size-limited tmpfs here (root, and a container that allows it)."""
    probe = "mount -t tmpfs -o size=1M tmpfs /mnt && test $(df -k --output=size /mnt | tail -1) -le 1024"
    try:
        return subprocess.run(["unshare", "-m", "sh", "-c", probe], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


SKIP_REASON = "needs `unshare -m` and tmpfs mounts (root in a private mount namespace)"
