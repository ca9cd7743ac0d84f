"""Audio I/O: decode any common container with soundfile, resample to 16 kHz mono float32 with soxr.

Audio everywhere in speechlm is a 1-D float32 numpy array at 16 kHz (see docs/design.md).
No torchaudio/torchcodec: neither works beside the CPU torch build (docs/pitfalls.md, pitfall 13).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

SAMPLE_RATE = 16000


class AudioError(ValueError):
    """Audio that cannot be used: undecodable bytes, no samples, or non-finite samples."""


class AudioNotFound(AudioError):
    """A file path that names no file: said as such, not as a decoder's "System error"."""


def decode(data: bytes | bytearray | memoryview | str | Path) -> tuple[np.ndarray, int]:
    """(samples float32 [n] or [n, channels], sample rate) from bytes or a file path."""
    src = io.BytesIO(bytes(data)) if isinstance(data, (bytes, bytearray, memoryview)) else str(data)
    what = f"{len(bytes(data))} bytes" if not isinstance(src, str) else src
    if isinstance(src, str) and not Path(src).is_file():
        raise AudioNotFound(f"audio file not found: {src}")
    try:
        wave, sr = sf.read(src, dtype="float32", always_2d=False)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError, OSError) as e:
        raise AudioError(f"cannot decode audio ({what}): {e}") from None
    return wave, int(sr)


def to_mono_16k(wave: np.ndarray, sr: int) -> np.ndarray:
    """Average channels (axis 1 for a [n, channels] array) and resample to 16 kHz; float32 1-D."""
    wave = np.asarray(wave, dtype=np.float32)
    if wave.ndim == 2:
        wave = wave.mean(axis=1, dtype=np.float32)
    elif wave.ndim != 1:
        raise AudioError(f"expected audio of shape [n] or [n, channels], got {wave.shape}")
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


def load(data: bytes | bytearray | memoryview | str | Path) -> np.ndarray:
    """Decode + to_mono_16k, rejecting empty or non-finite audio with AudioError."""
    wave, sr = decode(data)
    wave = to_mono_16k(wave, sr)
    if wave.size == 0:
        raise AudioError("audio has no samples")
    if not np.isfinite(wave).all():
        raise AudioError("audio has non-finite samples (NaN or inf)")
    return wave
