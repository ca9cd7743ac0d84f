"""The local model cache: `$SPEECHLM_CACHE` (default `~/.cache/speechlm`), and folders built into it
once, under a file lock, moved into place whole (the tiny twins, the converted offline weights)."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("SPEECHLM_CACHE") or Path.home() / ".cache" / "speechlm").expanduser()


def build_once(kind: str, name: str, version: int, build) -> Path:
    """`$SPEECHLM_CACHE/<kind>/<name>-v<version>`, made once by `build(empty_dir)` under a file lock
    (ranks may call it together) and moved into place whole, so a half-built folder is never seen."""
    root = cache_root() / kind
    target = root / f"{name}-v{version}"
    if (target / "config.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "config.json").is_file():
            tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}-"))
            try:
                (tmp / "out").mkdir()
                build(tmp / "out")
                os.replace(tmp / "out", target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return target
