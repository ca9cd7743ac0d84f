"""Audio I/O: decode any common container with soundfile, resample to 16 kHz mono float32 with soxr.

Audio everywhere in speechlm is a 1-D float32 numpy array at 16 kHz (see docs/design.md).
No torchaudio/torchcodec: neither works beside the CPU torch build (docs/pitfalls.md, pitfall 13).
What a clip must be to be transcribed (its format, finite samples, its level, its mix) is checked by
speechlm.audio_checks, which the export carries too; its names are here for every caller (the server
asks `check_format` of a header before decoding).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from speechlm.audio_checks import (  # noqa: F401  (the checks' names, for every caller of this module)
    MAX_CHANNELS,
    MAX_SAMPLE_RATE,
    MIN_SAMPLE_RATE,
    SAMPLE_RATE,
    AudioError,
    check_clip,
    check_clips,
    check_format,
    mix_down,
    prepare,
)


class AudioNotFound(AudioError):
    """A file path that names no file: said as such, not as a decoder's "System error"."""


def decode(data: bytes | bytearray | memoryview | str | Path, name: str | None = None) -> tuple[np.ndarray, int]:
    """(samples float32 [n] or [n, channels], sample rate) from bytes or a file path; AudioError
    (naming `name`, if given) when libsndfile can't read it, AudioNotFound for a path to no file."""
    src = io.BytesIO(bytes(data)) if isinstance(data, (bytes, bytearray, memoryview)) else str(data)
    what = f"{len(bytes(data))} bytes" if not isinstance(src, str) else src
    if isinstance(src, str) and not Path(src).is_file():
        raise AudioNotFound(f"{name + ': ' if name else ''}audio file not found: {src}")
    try:
        wave, sr = sf.read(src, dtype="float32", always_2d=False)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError, OSError) as e:
        raise AudioError(f"{name + ': ' if name else ''}cannot decode audio ({what}): {e}") from None
    return wave, int(sr)


def to_mono_16k(wave: np.ndarray, sr: int) -> np.ndarray:
    """Average channels (axis 1 for a [n, channels] array; `mix_down`: the loudest one where they cancel)
    and resample to 16 kHz; float32 1-D."""
    wave = mix_down(wave)
    if sr <= 0:
        raise AudioError(f"invalid sample rate {sr}")
    if sr != SAMPLE_RATE and wave.size:
        wave = soxr.resample(wave, sr, SAMPLE_RATE, quality="HQ")
    return np.ascontiguousarray(wave, dtype=np.float32)


def encode_flac(wave: np.ndarray, sr: int = SAMPLE_RATE) -> bytes:
    """16-bit PCM FLAC bytes. The same samples always give the same bytes (no timestamps in FLAC)."""
    wave = np.asarray(wave, dtype=np.float32)
    if wave.ndim != 1:
        raise AudioError(f"encode_flac expects mono [n] audio, got shape {wave.shape}")
    # quantize here (clip, round) rather than let libsndfile wrap out-of-range floats
    pcm = np.round(np.clip(wave, -1.0, 32767 / 32768) * 32768).astype(np.int16)
    buf = io.BytesIO()
    sf.write(buf, pcm, sr, format="FLAC", subtype="PCM_16")
    return buf.getvalue()


def load(data: bytes | bytearray | memoryview | str | Path, name: str | None = None) -> np.ndarray:
    """Decode, check (`prepare`: an impossible format, no samples or non-finite samples are an AudioError
    naming `name`; float samples beyond full scale and cancelling channels are fixed with a warning),
    resample to 16 kHz."""
    wave, sr = decode(data, name)
    name = name or (str(data) if isinstance(data, (str, Path)) else "audio")
    return check_clip(to_mono_16k(prepare(wave, sr, name), sr), name)
