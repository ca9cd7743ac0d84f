"""The run folder's layout: what the trainer writes and the loaders (`-m RUN`, resume, eval, export) read.

    RUN/config.yaml                          the run's resolved config
    RUN/checkpoints/step-N/                  a complete checkpoint (written as `.tmp-step-N/`, then renamed)
    RUN/checkpoints/step-N/trainer_state.json   its config, scheduler, per-rank reader position and RNG states
    RUN/checkpoints/step-N/model/            its model folder (speechlm.model.folder)
    RUN/checkpoints/latest                   the name of the newest complete checkpoint (moved last)
    RUN/final/                               the self-contained model folder at the end of a run

Plain paths only (no torch): the trainer (speechlm.train.checkpoint) and the loaders
(speechlm.inference.load, speechlm.inference.bases) share these names, and neither imports the other.
"""

from __future__ import annotations

import re
from pathlib import Path

RUN_CONFIG = "config.yaml"
CHECKPOINTS = "checkpoints"
LATEST = "latest"
STATE = "trainer_state.json"
MODEL = "model"
FINAL = "final"
STEP_RE = re.compile(r"^step-(\d+)$")


def step_name(step: int) -> str:
    return f"step-{step}"


def is_checkpoint(path: Path) -> bool:
    """A complete checkpoint: its trainer_state.json is the last file a save writes before the rename."""
    return (Path(path) / STATE).is_file()


def latest(checkpoints: Path) -> Path | None:
    """The complete checkpoint the `latest` pointer in `checkpoints` names (None: no pointer, or it names
    no complete checkpoint)."""
    pointer = Path(checkpoints) / LATEST
    if not pointer.is_file():
        return None
    target = pointer.parent / pointer.read_text().strip()
    return target if is_checkpoint(target) else None


def checkpoint_at(path: str | Path) -> Path | None:
    """The complete checkpoint `path` names: a `step-N` dir itself, or the one the `latest` pointer in
    it or in its `checkpoints/` names (a checkpoints dir, a run dir); None when there is none. Resuming
    and loading a run's model read runs alike."""
    p = Path(path)
    if is_checkpoint(p):
        return p
    for folder in (p, p / CHECKPOINTS):
        found = latest(folder)
        if found is not None:
            return found
    return None
