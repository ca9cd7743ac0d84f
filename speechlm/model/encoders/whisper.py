"""Whisper: the encoder of `openai/whisper-*` checkpoints, on variable-length input up to 30 s.

Checkpoints are `WhisperForConditionalGeneration` (keys `model.encoder.*`) or `WhisperModel`
(`encoder.*`); only the encoder is loaded, the decoder's weights are ignored on purpose.

Stock `WhisperEncoder` only takes exactly 3000 mel frames (every clip padded to 30 s). Here, as in
Ultravox's ModifiedWhisperEncoder, the positional embeddings are sliced to the input length, and a
batch's padding is masked inside the encoder so a clip's output does not depend on its batch mates:
the mel frames past a clip's end are zeroed before conv1 and conv1's outputs past it before conv2
(what a clip alone sees as the convs' zero padding), and attention ignores padded keys. On a full
30 s input it computes exactly what the stock encoder does.

Time: conv1 (k3 s1 p1) keeps the 100 mel frames/s, conv2 (k3 s2 p1) halves them: frames =
ceil(mel / 2), 50 per second; a clip of N samples has ceil(N / 160) mel frames.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import WhisperConfig
from transformers.audio_utils import mel_filter_bank
from transformers.modeling_outputs import BaseModelOutput
from transformers.models.whisper.modeling_whisper import WhisperEncoder

from .base import SAMPLE_RATE, EncoderFamily, LogMelFeatures

log = logging.getLogger(__name__)


@dataclass
class WhisperFeatures(LogMelFeatures):
    """transformers.WhisperFeatureExtractor's log-mel in torch, per clip, without padding to 30 s.

    Each clip's frames are those the stock extractor gives it padded with silence to 30 s (its
    default): a periodic Hann STFT (n_fft 400, hop 160) of the clip followed by zeros, Slaney mel
    filters, log10 floored 8 under the clip's maximum, then (x + 4) / 4. A clip of N samples gets
    ceil(N / 160) frames (the stock extractor's attention mask), whatever it is batched with.
    Output is time-major like every family's: [B, T, num_mel_bins].
    """

    chunk_length: int = 30  # seconds: the encoder's positional embeddings end there

    def __post_init__(self):
        fb = mel_filter_bank(
            num_frequency_bins=1 + self.n_fft // 2,
            num_mel_filters=self.num_mel_bins,
            min_frequency=0.0,
            max_frequency=8000.0,
            sampling_rate=self.sampling_rate,
            norm="slaney",
            mel_scale="slaney",
        )
        self._mel_fb = torch.from_numpy(fb).float()  # [n_freqs, n_mels]
        self._window = self.hann_window(self.n_fft)

    @property
    def feature_size(self) -> int:
        return self.num_mel_bins

    @property
    def max_samples(self) -> int:
        return self.chunk_length * self.sampling_rate

    @property
    def max_frames(self) -> int:
        return self.max_samples // self.hop_length

    @property
    def frames_per_second(self) -> float:
        return self.sampling_rate / self.hop_length

    def num_feature_frames(self, num_samples: int) -> int:
        return -(-int(num_samples) // self.hop_length)

    def too_long(self, i: int, num_samples: int) -> str:
        return (
            f"clip {i}: {num_samples / self.sampling_rate:.2f} s is longer than the Whisper "
            f"encoder's {self.chunk_length} s limit"
        )

    @torch.no_grad()
    def extract(self, audio: torch.Tensor, lengths: list[int]) -> torch.Tensor:
        """Zero-padded batch [B, N] -> log-mel [B, T, num_mel_bins] with T = the longest clip's frames."""
        frames = max(self.num_feature_frames(n) for n in lengths)
        # silence after every clip, as the stock extractor pads it to 30 s: up to past the reach of the
        # last frame's window (its far-end reflect padding then mirrors only zeros), or to exactly 30 s
        # when that comes first, where the stock one's reflect padding starts too
        width = min(audio.shape[1] + self.n_fft, max(self.max_samples, audio.shape[1]))
        audio = nn.functional.pad(audio.float(), (0, width - audio.shape[1]))
        spec = torch.stft(
            audio,
            self.n_fft,
            self.hop_length,
            window=self._window.to(audio.device),
            center=True,
            pad_mode="reflect",
            return_complex=True,
        )
        power = spec.abs().pow(2)  # [B, n_freqs, frames]
        mel = torch.matmul(power.transpose(-1, -2), self._mel_fb.to(audio.device))  # [B, frames, n_mels]
        logmel = mel.clamp_min(1e-10).log10()
        # the maximum the stock extractor takes over its 3000 frames: frames past a clip's windows
        # hold only silence (-10), so any batch width gives the same maximum
        mx = logmel[:, : self.max_frames].amax(dim=(-2, -1), keepdim=True)
        logmel = (torch.maximum(logmel, mx - 8.0) + 4.0) / 4.0
        return logmel[:, :frames].contiguous()


class VarLenWhisperEncoder(WhisperEncoder):
    """WhisperEncoder on inputs of up to 30 s, with a padding mask (see the module docstring).

    forward takes what the stock one does, `input_features` [B, n_mels, T], plus `attention_mask`
    [B, T] over mel frames (1 = real), and returns `last_hidden_state` [B, ceil(T / 2), D] and the
    `attention_mask` [B, ceil(T / 2)] of the output frames.
    """

    # the decoder's weights in a full checkpoint are skipped on purpose (logged once by the loader)
    _keys_to_ignore_on_load_unexpected = [r"^decoder\.", r"^model\.decoder\.", r"^proj_out\."]

    def max_input_frames(self) -> int:
        return self.config.max_source_positions * self.conv1.stride[0] * self.conv2.stride[0]

    def output_lengths(self, input_lengths):
        return (input_lengths - 1) // 2 + 1

    def forward(self, input_features: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
        frames = input_features.shape[-1]
        if frames > self.max_input_frames():
            raise ValueError(
                f"Whisper takes at most {self.max_input_frames()} mel frames "
                f"({self.max_input_frames() // 100} s), got {frames}"
            )
        out_mask = None
        if attention_mask is not None:
            keep = attention_mask.bool()[:, None, :]  # [B, 1, T]
            x = input_features.masked_fill(~keep, 0.0)
            x = nn.functional.gelu(self.conv1(x)).masked_fill(~keep, 0.0)
        else:
            x = nn.functional.gelu(self.conv1(input_features))
        x = nn.functional.gelu(self.conv2(x)).permute(0, 2, 1)  # [B, T', D]
        length = x.shape[1]
        hidden = x + self.embed_positions.weight[:length].to(x.dtype)
        hidden = nn.functional.dropout(hidden, p=self.dropout, training=self.training)
        bias = None
        if attention_mask is not None:
            out_lengths = self.output_lengths(attention_mask.long().sum(-1))
            out_mask = torch.arange(length, device=x.device)[None, :] < out_lengths[:, None]
            # additive key-padding bias [B, 1, 1, T']: padded frames attend to real ones and are
            # never attended to, so real frames never see them
            bias = torch.zeros(out_mask.shape, dtype=hidden.dtype, device=hidden.device)
            bias = bias.masked_fill(~out_mask, torch.finfo(hidden.dtype).min)[:, None, None, :]
        for layer in self.layers:
            if self.training and self.layerdrop > 0.0 and torch.rand([]) < self.layerdrop:
                continue
            hidden = layer(hidden, bias, **kwargs)
        hidden = self.layer_norm(hidden)
        out = BaseModelOutput(last_hidden_state=hidden)
        out.attention_mask = out_mask.long() if out_mask is not None else None
        return out


class WhisperFamily(EncoderFamily):
    name = "whisper"
    max_seconds = 30.0
    # the encoder's keys under either checkpoint class's prefix map onto the bare encoder; the
    # decoder's are ignored on purpose (VarLenWhisperEncoder._keys_to_ignore_on_load_unexpected)
    pretrained_class = VarLenWhisperEncoder
    load_kwargs = {"key_mapping": {r"^model\.encoder\.": "", r"^encoder\.": ""}}
    unused_checkpoint_keys = ("decoder.", "proj_out")  # the planner counts only the encoder's tensors
    _logged_decoder_skip: set[str] = set()

    @staticmethod
    def encoder_config(config) -> WhisperConfig:
        if not isinstance(config, WhisperConfig):
            raise ValueError(f"expected a Whisper config, got model_type '{config.model_type}'")
        return config

    def __init__(self, config, features_settings: dict | None = None):
        super().__init__(config, features_settings)
        self.max_seconds = float(self.features.chunk_length)

    @property
    def hidden_size(self) -> int:
        return int(self.config.d_model)

    @property
    def ffn_size(self) -> int:
        return int(self.config.encoder_ffn_dim)

    def make_features(self, settings: dict | None) -> WhisperFeatures:
        if settings:
            return WhisperFeatures.from_dict(settings)
        # the positional embeddings end at max_source_positions output frames (1500: 30 s)
        seconds = self.config.max_source_positions * 2 * WhisperFeatures.hop_length // SAMPLE_RATE
        return WhisperFeatures(num_mel_bins=self.config.num_mel_bins, chunk_length=seconds)

    def conv_layers(self) -> list[list[int]]:
        return [[1, 3, 1], [1, 3, 2]]

    def after_load(self, encoder, dtype: torch.dtype) -> VarLenWhisperEncoder:
        path = str(encoder.config.name_or_path)
        if path not in self._logged_decoder_skip:
            self._logged_decoder_skip.add(path)
            log.info(
                "%s: loaded only the Whisper encoder; the checkpoint's decoder weights are ignored on purpose", path
            )
        return encoder

    def encode(self, encoder, input_features, feature_mask):
        out = encoder(input_features.transpose(1, 2), attention_mask=feature_mask)
        return out.last_hidden_state, out.attention_mask.sum(-1)

    @staticmethod
    def build_tiny(out: Path) -> None:
        """The tiny twin: a small `WhisperForConditionalGeneration` (the class of the `openai/whisper-*`
        checkpoints; only its encoder is loaded), with 30 s of positions like the real ones."""
        from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

        torch.manual_seed(0)
        cfg = WhisperConfig(
            vocab_size=64,
            num_mel_bins=80,
            d_model=64,
            encoder_layers=2,
            encoder_attention_heads=4,
            decoder_layers=1,
            decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            max_source_positions=1500,
            max_target_positions=32,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=1,
            decoder_start_token_id=2,
            begin_suppress_tokens=None,
            suppress_tokens=None,
        )
        WhisperForConditionalGeneration(cfg).save_pretrained(out)
        WhisperFeatureExtractor(feature_size=80).save_pretrained(out)


FAMILY = WhisperFamily
# what a model folder's code carries of this file (speechlm.model.folder.generate)
EXPORT = ("WhisperFeatures", "VarLenWhisperEncoder", "WhisperFamily")
