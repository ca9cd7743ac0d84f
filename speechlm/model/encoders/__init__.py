"""Audio encoder families: everything that differs between pretrained encoders, behind one interface.

A family is one file (`granite.py`, `whisper.py`): features, frame arithmetic, frozen-mode rules,
how its weights load, its tiny twin and its planner shapes (speechlm.model.encoders.base). It is
registered below in one line: its name, its module and the checkpoint `model_type`s it handles.

`family_for` is the resolver: a run resolves its family once (the trainer, the planner, an export's
reload) and hands the object to everything else:

    fam = family_for("openai/whisper-tiny.en")     # or a local dir, or tiny/<name>
    fam.name, fam.max_seconds, fam.hidden_size
    fam.features(waves) -> (input_features [B, T, F] float32, feature_mask [B, T] long)
    fam.audio_token_count(num_samples, pool_stride)  # `<audio>` placeholders = what the projector emits
    hidden, frames = fam.encode(encoder, input_features, feature_mask)
    fam.set_mode(encoder, training, trainable)     # frozen-mode rules (e.g. BatchNorm always eval)
"""

from __future__ import annotations

import importlib

from transformers import AutoConfig

from speechlm.config import ConfigError
from speechlm.model import hfconfig, ids
from speechlm.model.encoders.base import EncoderFamily, conv_output_length

# name -> (module, model_types). A family's module (and the transformers modeling code it needs) is
# imported only when a checkpoint of that family is used, so a wrong id fails in well under a second.
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {}


def register(name: str, module: str, model_types: tuple[str, ...]) -> None:
    """One line per family: its `FAMILY` class lives in `module` and handles these `model_type`s."""
    FAMILIES[name] = (module, tuple(model_types))


register("granite_speech5", "speechlm.model.encoders.granite", ("granite_speech5_ctc", "granite_speech5_encoder"))
register("whisper", "speechlm.model.encoders.whisper", ("whisper",))


def supported() -> str:
    return "; ".join(f"{n} (model_type {', '.join(types)})" for n, (_, types) in FAMILIES.items())


def family_class(model_type: str, model_id: str = "") -> type[EncoderFamily]:
    for module, types in FAMILIES.values():
        if model_type in types:
            return importlib.import_module(module).FAMILY
    where = f"'{model_id}' has" if model_id else "got"
    raise ConfigError(
        f"model.audio_model_id: {where} model_type '{model_type}', which no encoder family handles; "
        f"supported: {supported()}"
    )


def family_from_config(config, model_id: str = "", features_settings: dict | None = None) -> EncoderFamily:
    """The family of an already loaded transformers config."""
    cls = family_class(getattr(config, "model_type", ""), model_id)
    try:
        return cls(config, features_settings)
    except ValueError as e:
        raise ConfigError(f"model.audio_model_id: {e}") from None


def family_for(
    model_id: str, trust_remote_code: bool = False, allow_bundled: bool = False, features_settings: dict | None = None
) -> EncoderFamily:
    """The family of `model_id` (hub id, local dir or `tiny/<name>`), from its config alone.
    `allow_bundled`: shapes only (planner, meta counts), from the bundled real config when the
    checkpoint's is not local; never downloads."""
    if allow_bundled:
        cfg = hfconfig.load_config(model_id, trust_remote_code=trust_remote_code, allow_bundled=True)
    else:
        try:
            cfg = AutoConfig.from_pretrained(ids.resolve(model_id), trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as e:
            raise ConfigError(f"model.audio_model_id: can't read the config of '{model_id}': {e}") from None
    return family_from_config(cfg, model_id, features_settings)


__all__ = [
    "FAMILIES",
    "EncoderFamily",
    "conv_output_length",
    "family_class",
    "family_for",
    "family_from_config",
    "register",
    "supported",
]
