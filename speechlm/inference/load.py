"""The model a CLI's `-m MODEL` names: a model folder (an export, a run's `final/`), a checkpoint `step-N`
(its `model/`), a run dir (its latest complete checkpoint, found as resuming finds it) or a Hub id."""

from __future__ import annotations

from pathlib import Path

from speechlm.config import ConfigError
from speechlm.model import from_pretrained
from speechlm.model.io import is_model_folder
from speechlm.train.checkpoint import checkpoint_at


def local_model(model_dir: str) -> Path | None:
    """The local folder MODEL_DIR names, None for a Hub id, ConfigError for neither. Cheap: CLIs
    call it before anything slow so that a wrong path fails at once."""
    p = Path(model_dir)
    if p.is_dir():
        return p
    if p.suffix or model_dir.startswith((".", "/")) or model_dir.count("/") != 1:
        raise ConfigError(f"model '{model_dir}' is neither a local folder nor a Hub id")
    return None


def load_model(model_dir: str):
    """The SpeechLM of a local folder (see `resolve_model_dir`) or a Hub id (downloaded first)."""
    p = local_model(model_dir)
    if p is None:
        from huggingface_hub import snapshot_download

        p = Path(snapshot_download(model_dir))
    return from_pretrained(resolve_model_dir(p))


def resolve_model_dir(p: Path) -> Path:
    """A model folder (a run's `final/` too), a checkpoint `step-N/` (its `model/`), or a run dir or its
    `checkpoints/` (the latest complete checkpoint's `model/`)."""
    for cand in (p, p / "model"):
        if is_model_folder(cand):
            return cand
    step = checkpoint_at(p)
    if step is not None and is_model_folder(step / "model"):
        return step / "model"
    raise ConfigError(f"{p} is not a speechlm model folder (no speechlm config.json, model/ or checkpoints/latest)")
