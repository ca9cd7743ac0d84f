"""What every encoder family shares: the family interface, conv frame arithmetic and a log-mel base.

Part of the modelling layer: imports only torch, numpy, transformers and its sibling modules
(relative), so it can be copied into an exported model folder as it is.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import ClassVar

import numpy as np
import torch

from speechlm.audio_checks import SAMPLE_RATE

from ..projector import pooled_length


def conv_output_length(length, conv_layers):
    """Frames after each `[padding, kernel, stride]` layer: (L + 2p - k) // s + 1 (ints or tensors)."""
    for padding, kernel, stride in conv_layers:
        length = (length + 2 * padding - kernel) // stride + 1
    return length


@dataclass
class LogMelFeatures:
    """Log-mel features of 16 kHz clips in torch, batched with padding and a frame mask.

    A family subclasses it with its own defaults and `extract` (the spectrogram math where the
    families differ); validation, padding, settings and the mask are shared.
    """

    num_mel_bins: int = 80
    sampling_rate: int = SAMPLE_RATE
    n_fft: int = 400
    hop_length: int = 160
    padding_value: float = 0.0

    # the encoder's smallest input in samples, where it needs more than one hop: set by its family
    # (EncoderFamily.__init__); a class variable, so not one of the saved settings
    min_input: ClassVar[int] = 0

    @property
    def min_samples(self) -> int:
        """The shortest clip the features and the encoder take: shorter ones are padded to it."""
        return max(self.hop_length, self.min_input)

    @property
    def max_samples(self) -> int | None:
        return None  # no limit

    def num_feature_frames(self, num_samples: int) -> int:
        raise NotImplementedError

    def extract(self, audio: torch.Tensor, lengths: list[int]) -> torch.Tensor:
        """Zero-padded batch [B, N] float32 -> features [B, T, feature_size]."""
        raise NotImplementedError

    def too_long(self, i: int, num_samples: int) -> str:
        return f"clip {i}: {num_samples / self.sampling_rate:.2f} s is too long"

    @staticmethod
    def hann_window(length: int) -> torch.Tensor:
        """The STFT window, float32 whatever the default dtype: transformers builds an exported model
        under its weights' dtype (bf16), where a window made without one came out bf16 and moved the
        features by up to 0.17 from speechlm's (tests/export/test_export.py)."""
        return torch.hann_window(length, periodic=True, dtype=torch.float32)

    # ------------------------------------------------------------------ settings
    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict):
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown {cls.__name__} settings: {sorted(unknown)}")
        return cls(**d)

    # ------------------------------------------------------------------ features
    def __call__(self, waves: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        """Clips (1-D float arrays at 16 kHz) -> (input_features [B, T, F] float32, feature_mask [B, T] long).

        Clips are right-padded with `padding_value` to the longest; the mask marks each clip's
        `num_feature_frames` real frames. A clip shorter than `min_samples` (the encoder's smallest
        input) is first padded to it with silence, and is transcribed as the silence it is: a tiny
        upload must not fail the batch it shares (docs/reliability.md)."""
        if len(waves) == 0:
            raise ValueError(f"{type(self).__name__} got an empty batch")
        clips = []
        for i, w in enumerate(waves):
            a = np.asarray(w)
            if a.ndim != 1:
                raise ValueError(f"clip {i}: expected 1-D mono audio, got shape {a.shape}")
            if a.shape[0] == 0:
                raise ValueError(f"clip {i}: no samples")
            if self.max_samples is not None and a.shape[0] > self.max_samples:
                raise ValueError(self.too_long(i, a.shape[0]))
            clips.append(np.pad(a, (0, self.min_samples - a.shape[0])) if a.shape[0] < self.min_samples else a)
        lengths = [c.shape[0] for c in clips]
        buf = np.full((len(clips), max(lengths)), self.padding_value, dtype=np.float32)
        for i, c in enumerate(clips):
            buf[i, : lengths[i]] = c
        feats = self.extract(torch.from_numpy(buf), lengths)
        counts = torch.tensor([self.num_feature_frames(n) for n in lengths])
        mask = (torch.arange(feats.shape[1])[None, :] < counts[:, None]).long()
        return feats.float(), mask


class EncoderFamily:
    """One pretrained encoder family, bound to one checkpoint's encoder config (no weights; pickles,
    so the collator carries it into DataLoader workers).

    A family module subclasses it as its `FAMILY`; speechlm.model.encoders registers it in one line.
    Weights are read by the builders (speechlm.model.parts) from `pretrained_class` with `load_kwargs`.
    """

    name: str = ""
    max_seconds: float | None = None  # longest clip the encoder takes (None: no limit)
    frames_per_second: float = 50.0  # rate of the frames its transformer layers see (the planner's)
    pretrained_class: type | None = None  # the transformers class the encoder loads as
    load_kwargs: dict = {}  # extra from_pretrained arguments (e.g. a key mapping)
    attn_implementation: str | None = "sdpa"  # None: the encoder has no attention to choose for
    unused_checkpoint_keys: tuple[str, ...] = ()  # key fragments of checkpoint tensors it never loads

    def __init__(self, config, features_settings: dict | None = None):
        self.config = self.encoder_config(config)
        self.features = self.make_features(features_settings)
        self.features.min_input = self.smallest_input()

    # -------------------------------------------------------------- what a family defines
    @staticmethod
    def encoder_config(config):
        """The encoder's own config inside a checkpoint's config (ValueError if it is another kind)."""
        return config

    def make_features(self, settings: dict | None) -> LogMelFeatures:
        """The feature extractor (torch, variable-length batches), from saved settings or the config."""
        raise NotImplementedError

    def conv_layers(self) -> list[list[int]]:
        """`[padding, kernel, stride]` per time-subsampling step from feature frames to output frames."""
        raise NotImplementedError

    def after_load(self, encoder, dtype: torch.dtype):
        """The loaded encoder, made ready (e.g. every tensor one dtype)."""
        return encoder

    def meta_encoder(self):
        """The encoder module on the meta device (shapes and counts, no weights)."""
        with torch.device("meta"):
            return self.pretrained_class(self.config)

    def encode(self, encoder, input_features, feature_mask):
        """-> (hidden [B, L, D], frames [B] long): what the encoder emits and how much of it is real."""
        raise NotImplementedError

    def set_mode(self, encoder, training: bool, trainable: bool) -> None:
        """train()/eval() for the encoder when the SpeechLM switches mode. Default: a frozen encoder
        always evaluates (no dropout); a trained one follows the model."""
        encoder.train(training and trainable)

    # -------------------------------------------------------------- the planner's shapes
    @property
    def ffn_size(self) -> int:
        return int(getattr(self.config, "intermediate_size", None) or 4 * self.hidden_size)

    def layer_rates(self, num_layers: int) -> list[float]:
        """Per transformer layer, its frame rate relative to `frames_per_second` (subsampling inside)."""
        return [1.0] * num_layers

    def activation_elems_per_frame(self, meta_encoder, trained: bool, act_factor: float) -> float:
        """Elements the encoder keeps per frame: a frozen one runs under no_grad (one layer's transient:
        qkv, attention, FFN); a trained one saves every layer's activations, as the decoder's are
        counted (`act_factor` x (hidden + every Linear's output)), at the rate the layer runs at."""
        h = self.hidden_size
        if not trained:
            return 4 * h + 2 * self.ffn_size
        total = 0.0
        for rate, layer in zip(self.layer_rates(len(meta_encoder.layers)), meta_encoder.layers):
            outs = sum(m.out_features for m in layer.modules() if isinstance(m, torch.nn.Linear))
            total += rate * act_factor * (h + outs)
        return total

    # -------------------------------------------------------------- shared arithmetic
    @property
    def hidden_size(self) -> int:
        return int(self.config.hidden_size)

    def encoder_frames(self, feature_frames):
        """Output frames for `feature_frames` input frames (ints or tensors)."""
        return conv_output_length(feature_frames, self.conv_layers())

    def smallest_input(self) -> int:
        """Samples of the shortest clip the encoder gives an output frame for (a batch of clips no longer
        than it would fail: Granite's subsampling pools pairs of frames and needs two)."""
        hop = self.features.hop_length
        n = -(-max(hop, self.features.min_samples) // hop) * hop
        for _ in range(10_000):  # bounded: a family whose encoder emits no frame for any length is a bug
            if self.encoder_frames(self.features.num_feature_frames(n)) >= 1:
                return n
            n += hop
        raise ValueError(f"{self.name}: the encoder gives no output frame for clips up to {n} samples")

    def audio_token_count(self, num_samples: int, pool_stride: int) -> int:
        """How many `<audio>` placeholders a clip of `num_samples` (16 kHz) gets."""
        frames = self.encoder_frames(self.features.num_feature_frames(num_samples))
        return max(0, pooled_length(frames, int(pool_stride)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config.model_type}, hidden {self.hidden_size})"
