"""Granite Speech 5: the conformer encoder of the `GraniteSpeech5ForCTC` hub checkpoints.

Features: `speechlm.features.FeatureExtractor` (stacked log-mel + deltas, [B, T, 320], 50 frames/s).
Each subsampling block halves time (`subsample_layers`), so a clip of N samples gets
ceil((N // 160) / 2) frames, halved per block. BatchNorm lives in its conv modules: the encoder is
in eval mode always, trained or not, so the pretrained running statistics never move (pitfall 12).
"""
from __future__ import annotations

import torch
from transformers import GraniteSpeech5Encoder, GraniteSpeech5EncoderConfig

from speechlm import tiny
from speechlm.config import ConfigError
from speechlm.features import FeatureExtractor
from speechlm.model.encoders import EncoderFamily


def load_granite_encoder(path: str, config: GraniteSpeech5EncoderConfig, dtype: torch.dtype) -> GraniteSpeech5Encoder:
    """The one place Granite weights are read: the hub checkpoints are GraniteSpeech5ForCTC, and the
    bare encoder loads from them (prefix "encoder.")."""
    return GraniteSpeech5Encoder.from_pretrained(path, config=config, dtype=dtype, attn_implementation="sdpa")


class GraniteSpeech5Family(EncoderFamily):
    name = "granite_speech5"
    model_types = ("granite_speech5_ctc", "granite_speech5_encoder")

    @staticmethod
    def encoder_config(config) -> GraniteSpeech5EncoderConfig:
        config = getattr(config, "encoder_config", config)
        if not isinstance(config, GraniteSpeech5EncoderConfig):
            raise ConfigError(f"model.audio_model_id: expected a Granite Speech 5 config, got model_type '{config.model_type}'")
        return config

    def make_features(self, settings: dict | None) -> FeatureExtractor:
        if settings:
            return FeatureExtractor.from_dict(settings)
        return FeatureExtractor(num_mel_bins=self.config.num_mel_bins)

    def conv_layers(self) -> list[list[int]]:
        # each subsampling block pools pairs of frames, dropping a trailing odd one
        return [[0, 2, 2] for _ in self.config.subsample_layers]

    def load(self, model_id: str, dtype: torch.dtype, trust_remote_code: bool = False) -> GraniteSpeech5Encoder:
        enc = load_granite_encoder(tiny.resolve(model_id), self.config, dtype)
        # transformers keeps conv.norm (BatchNorm) in fp32, while DeepSpeed bf16 casts parameters but not
        # buffers: make every tensor one dtype on purpose so no mixed-dtype BatchNorm can happen.
        return enc.to(dtype)

    def meta_encoder(self) -> GraniteSpeech5Encoder:
        with torch.device("meta"):
            return GraniteSpeech5Encoder(self.config)

    def encode(self, encoder, input_features, feature_mask):
        out = encoder(input_features, attention_mask=feature_mask)
        return out.last_hidden_state, out.attention_mask.long().sum(-1)

    def set_mode(self, encoder, training: bool, trainable: bool) -> None:
        encoder.eval()  # always: BatchNorm statistics must never move (pitfall 12)


FAMILY = GraniteSpeech5Family
