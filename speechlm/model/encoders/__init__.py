"""Audio encoder families: everything that differs between pretrained encoders, behind one interface.

`model.audio_model_id` picks the family from its checkpoint config's `model_type`:

    fam = family_for("openai/whisper-tiny.en")     # or a local dir, or tiny/<name>
    fam.name, fam.max_seconds, fam.hidden_size
    fam.features(waves) -> (input_features [B, T, F] float32, feature_mask [B, T] long)
    fam.audio_token_count(num_samples, pool_stride)  # `<audio>` placeholders = what the projector emits
    encoder = fam.load(model_id, dtype)            # the frozen encoder module
    hidden, frames = fam.encode(encoder, input_features, feature_mask)
    fam.set_mode(encoder, training, trainable)     # frozen-mode rules (e.g. BatchNorm always eval)

A family object is bound to one checkpoint's encoder config, holds no weights and pickles (the
collator carries it into DataLoader workers). Each family module keeps its `from_pretrained` call in
one function (`load_<family>_encoder`), the only place weights are read.
"""
from __future__ import annotations

from speechlm.config import ConfigError
from speechlm.model.projector import pooled_length


def conv_output_length(length, conv_layers):
    """Frames after each `[padding, kernel, stride]` layer: (L + 2p - k) // s + 1 (ints or tensors)."""
    for padding, kernel, stride in conv_layers:
        length = (length + 2 * padding - kernel) // stride + 1
    return length


class EncoderFamily:
    """Base class; a family module subclasses it as its `FAMILY` and is listed in FAMILIES."""

    name: str = ""
    model_types: tuple[str, ...] = ()
    max_seconds: float | None = None  # longest clip the encoder takes (None: no limit)
    frames_per_second: float = 50.0  # rate of the frames its transformer layers see (the planner's)

    def __init__(self, config, features_settings: dict | None = None):
        self.config = self.encoder_config(config)
        self.features = self.make_features(features_settings)

    # -------------------------------------------------------------- what a family defines
    @staticmethod
    def encoder_config(config):
        """The encoder's own config inside a checkpoint's config."""
        return config

    def make_features(self, settings: dict | None):
        """The feature extractor (torch, variable-length batches), from saved settings or the config."""
        raise NotImplementedError

    def conv_layers(self) -> list[list[int]]:
        """`[padding, kernel, stride]` per time-subsampling step from feature frames to output frames."""
        raise NotImplementedError

    def load(self, model_id: str, dtype, trust_remote_code: bool = False):
        raise NotImplementedError

    def meta_encoder(self):
        """The encoder module on the meta device (shapes and counts, no weights)."""
        raise NotImplementedError

    def encode(self, encoder, input_features, feature_mask):
        """-> (hidden [B, L, D], frames [B] long): what the encoder emits and how much of it is real."""
        raise NotImplementedError

    def set_mode(self, encoder, training: bool, trainable: bool) -> None:
        """train()/eval() for the encoder when the SpeechLM switches mode. Default: a frozen encoder
        always evaluates (no dropout); a trained one follows the model."""
        encoder.train(training and trainable)

    # -------------------------------------------------------------- shared arithmetic
    @property
    def hidden_size(self) -> int:
        return int(self.config.hidden_size)

    def encoder_frames(self, feature_frames):
        """Output frames for `feature_frames` input frames (ints or tensors)."""
        return conv_output_length(feature_frames, self.conv_layers())

    def audio_token_count(self, num_samples: int, pool_stride: int) -> int:
        """How many `<audio>` placeholders a clip of `num_samples` (16 kHz) gets."""
        frames = self.encoder_frames(self.features.num_feature_frames(num_samples))
        return max(0, pooled_length(frames, int(pool_stride)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config.model_type}, hidden {self.hidden_size})"


# name -> (module, model_types). A family's module (and the transformers modeling code it needs) is
# imported only when a checkpoint of that family is used, so a wrong id fails in well under a second.
FAMILIES = {
    "granite_speech5": ("speechlm.model.encoders.granite", ("granite_speech5_ctc", "granite_speech5_encoder")),
    "whisper": ("speechlm.model.encoders.whisper", ("whisper",)),
}


def supported() -> str:
    return "; ".join(f"{n} (model_type {', '.join(types)})" for n, (_, types) in FAMILIES.items())


def family_class(model_type: str, model_id: str = "") -> type[EncoderFamily]:
    import importlib

    for module, types in FAMILIES.values():
        if model_type in types:
            return importlib.import_module(module).FAMILY
    where = f"'{model_id}' has" if model_id else "got"
    raise ConfigError(f"model.audio_model_id: {where} model_type '{model_type}', which no encoder family handles; "
                      f"supported: {supported()}")


def family_from_config(config, model_id: str = "", features_settings: dict | None = None) -> EncoderFamily:
    """The family of an already loaded transformers config."""
    return family_class(getattr(config, "model_type", ""), model_id)(config, features_settings)


def family_for(model_id: str, trust_remote_code: bool = False, allow_bundled: bool = False,
               features_settings: dict | None = None) -> EncoderFamily:
    """The family of `model_id` (hub id, local dir or `tiny/<name>`), from its config alone."""
    from speechlm import tiny
    from speechlm.model import parts

    if allow_bundled:  # shapes only (planner, meta counts): never downloads
        cfg = parts.load_config(model_id, trust_remote_code=trust_remote_code, allow_bundled=True)
    else:
        from transformers import AutoConfig

        try:
            cfg = AutoConfig.from_pretrained(tiny.resolve(model_id), trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as e:
            raise ConfigError(f"model.audio_model_id: can't read the config of '{model_id}': {e}") from None
    return family_from_config(cfg, model_id, features_settings)


__all__ = ["FAMILIES", "EncoderFamily", "conv_output_length", "family_class", "family_for", "family_from_config",
           "pooled_length", "supported"]
