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


def load_config(model_id: str, trust_remote_code: bool = False, allow_bundled: bool = False):
    """AutoConfig for a model id without any download; optionally the bundled copy as a fallback."""
    path = ids.resolve(model_id)
    try:
        return AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)
    except (OSError, ValueError) as e:
        bundled = bundled_config_path(model_id)
        if not (allow_bundled and bundled is not None):
            raise ConfigError(
                f"can't read the config of '{model_id}' locally ({type(e).__name__}) and none is bundled"
            ) from None
        d = json.loads(bundled.read_text())
        d = {k: v for k, v in d.items() if not k.startswith("_") and k not in ("hub_id", "model_id")}
        log.info("%s: not available locally, using the bundled config %s", model_id, bundled.name)
        return AutoConfig.for_model(d.pop("model_type"), **d)


def text_config(cfg):
    """The text decoder's config (multimodal hub configs such as Qwen3.5's nest it)."""
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
