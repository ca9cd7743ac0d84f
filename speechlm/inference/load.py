"""The model a CLI's `-m MODEL` names: a model folder (an export, a run's `final/`), a checkpoint `step-N`
(its `model/`), a run dir (its latest complete checkpoint, found as resuming finds it) or a Hub id."""

from __future__ import annotations

from pathlib import Path

from speechlm import runs
from speechlm.config import ConfigError
from speechlm.inference.bases import run_bases
from speechlm.model import from_pretrained
from speechlm.model.folder.io import is_model_folder


def local_model(model_dir: str) -> Path | None:
    """The local folder MODEL_DIR names, None for a Hub id, ConfigError for neither. Cheap: CLIs
    call it before anything slow so that a wrong path fails at once. A path that can't be a Hub id,
    or whose first folder is here (`out/demo` beside `out/`), is a missing folder, not a Hub lookup."""
    p = Path(model_dir)
    if p.is_dir():
        return p
    if p.exists():
        raise ConfigError(f"model '{model_dir}' is a file, not a model folder")
    if p.suffix or model_dir.startswith((".", "/", "~")) or model_dir.count("/") != 1 or Path(p.parts[0]).is_dir():
        raise ConfigError(f"model '{model_dir}': no such folder (and not a Hub id)")
    return None


def load_model(model_dir: str, bases: dict[str, str] | None = None):
    """The SpeechLM of a local folder (see `resolve_model_dir`) or a Hub id (downloaded first). A base
    the folder names as a local model comes from `bases` ({"decoder": PATH}: the `--base` flags), else
    from the run a checkpoint was trained in (speechlm.inference.bases.run_bases)."""
    p = local_model(model_dir)
    if p is None:
        from huggingface_hub import snapshot_download

        try:
            p = Path(snapshot_download(model_dir))
        except (OSError, ValueError) as e:  # offline, no such repo, gated, a bad id: one line, no traceback
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(
                f"model '{model_dir}': no such folder, and no Hub model of that id could be fetched ({why})"
            ) from None
    folder = resolve_model_dir(p)
    return from_pretrained(folder, bases={**run_bases(folder), **(bases or {})})


def resolve_model_dir(p: Path) -> Path:
    """A model folder (a run's `final/` too), a checkpoint `step-N/` (its `model/`), or a run dir or its
    `checkpoints/` (the latest complete checkpoint's `model/`)."""
    for cand in (p, p / runs.MODEL):
        if is_model_folder(cand):
            return cand
    step = runs.checkpoint_at(p)
    if step is not None and is_model_folder(step / runs.MODEL):
        return step / runs.MODEL
    raise ConfigError(f"{p} is not a speechlm model folder (no speechlm config.json, model/ or checkpoints/latest)")
