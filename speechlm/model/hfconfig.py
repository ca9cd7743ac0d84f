"""transformers configs of model ids without any download, with the bundled real configs
(speechlm/model/configs/) as an optional fallback for shapes-only uses."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from transformers import AutoConfig

from speechlm.config import ConfigError
from speechlm.model import ids

log = logging.getLogger(__name__)
CONFIG_DIR = Path(__file__).parent / "configs"


def bundled_config_path(model_id: str) -> Path | None:
    """The bundled real config for a hub id: named after it (org--name.json or name.json), or one
    that records the id (`_name_or_path`, `hub_id`, `model_id`); None when none is bundled."""
    for stem in (model_id.replace("/", "--"), model_id.split("/")[-1]):
        p = CONFIG_DIR / f"{stem}.json"
        if p.is_file():
            return p
    for p in sorted(CONFIG_DIR.glob("*.json")):
        try:
            d = json.loads(p.read_text())
        except ValueError:
            continue
        if model_id in (d.get("_name_or_path"), d.get("hub_id"), d.get("model_id")):
            return p
    return None


def bundled_raw(model_id: str) -> dict | None:
    """The bundled real config of a hub id as a config dict (its notes left out), or None."""
    p = bundled_config_path(model_id)
    if p is None:
        return None
    d = json.loads(p.read_text())
    return {k: v for k, v in d.items() if not k.startswith("_") and k not in ("hub_id", "model_id")}


def not_found(model_id: str, err: Exception) -> ConfigError:
    return ConfigError(
        f"can't read the config of '{model_id}' locally ({type(err).__name__}) and none is bundled in {CONFIG_DIR}"
    )


def _find_config(model_id: str, trust_remote_code: bool, allow_bundled: bool):
    """(config, where it came from): local files (a dir, `tiny/*`, the Hub cache), else the bundled copy."""
    path = ids.resolve(model_id)
    try:
        cfg = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)
        return cfg, f"local {path}" if Path(path).is_dir() else f"hub cache {model_id}"
    except (OSError, ValueError) as e:
        d = bundled_raw(model_id) if allow_bundled else None
        if d is None:
            raise not_found(model_id, e) from None
        name = bundled_config_path(model_id).name
        log.info("%s: not available locally, using the bundled config %s", model_id, name)
        return AutoConfig.for_model(d.pop("model_type"), **d), f"bundled {name}"


def load_config(model_id: str, trust_remote_code: bool = False, allow_bundled: bool = False):
    """AutoConfig for a model id without any download; optionally the bundled copy as a fallback."""
    return _find_config(model_id, trust_remote_code, allow_bundled)[0]


def config_source(model_id: str, trust_remote_code: bool = False) -> str:
    """Where `load_config(..., allow_bundled=True)` finds the config of `model_id`: `local DIR`,
    `hub cache ID` or `bundled FILE` (the planner reports it)."""
    return _find_config(model_id, trust_remote_code, True)[1]


def text_config(cfg):
    """The text decoder's config (multimodal hub configs such as Qwen3.5's nest it)."""
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
