"""An upload decoded to 16 kHz mono with its cost bounded before it is paid.

`speechlm.audio.load` decodes a whole file and then resamples it: fine for a user's own files, but a
server's client chooses the header. A 40 KB WAV whose header says 1 Hz decodes to 20,000 s, and 600 s
of 96 kHz 8-channel FLAC silence is 2 GB of float32 before the duration is known. Here the header is
read first (sample rate, channels and length refused before any sample is decoded), then the file is
decoded in blocks: each block's channels averaged and fed to soxr's streaming resampler, so what is
held is one block and the 16 kHz output, and decoding stops as soon as the output passes the limit
(a header that understates the length gains nothing). The samples are those of `audio.load`: the
channel mean is per frame, and soxr's stream gives its one-shot `resample`'s samples bit for bit
(tests/serve/test_serve_hostile.py checks both against `audio.load`).
"""

from __future__ import annotations

import io

import numpy as np
import soundfile as sf
import soxr

from speechlm.audio import MAX_CHANNELS, SAMPLE_RATE
from speechlm.audio import MAX_SAMPLE_RATE as MAX_RATE  # Hz: outside the range a header is no recording
from speechlm.audio import MIN_SAMPLE_RATE as MIN_RATE  # (the bomb said 1 Hz)

BLOCK_FRAMES = 1 << 16  # frames decoded at a time: 16 MiB of float32 at 64 channels
UNKNOWN_LENGTH = 1 << 62  # libsndfile's frame count for a stream whose length the header does not give


class BadAudio(ValueError):
    """An upload that is no usable audio (undecodable, no samples, non-finite samples, absurd header)."""


class TooLong(BadAudio):
    def __init__(self, seconds: float, limit: float, from_header: bool):
        said = "its header says it is" if from_header else "it is more than"
        super().__init__(f"{said} {seconds:.1f} s long, over the server's limit of {limit:g} s (--max-seconds)")


def _open(data: bytes) -> sf.SoundFile:
    try:
        return sf.SoundFile(io.BytesIO(data))
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError, OSError) as e:
        raise BadAudio(f"cannot decode audio ({len(data)} bytes): {e}") from None


def check_header(f: sf.SoundFile, max_seconds: float) -> None:
    """Refuse, before decoding, what the header alone shows to be no recording or too long."""
    if not MIN_RATE <= f.samplerate <= MAX_RATE:
        raise BadAudio(f"sample rate {f.samplerate} Hz is outside {MIN_RATE}..{MAX_RATE} Hz")
    if not 1 <= f.channels <= MAX_CHANNELS:
        raise BadAudio(f"{f.channels} channels: at most {MAX_CHANNELS} are accepted")
    if 0 < f.frames < UNKNOWN_LENGTH and f.frames / f.samplerate > max_seconds:
        raise TooLong(f.frames / f.samplerate, max_seconds, from_header=True)


def decode(data: bytes, max_seconds: float) -> np.ndarray:
    """16 kHz mono float32 samples of an uploaded file (`audio.load`'s), at most `max_seconds` of them."""
    with _open(data) as f:
        check_header(f, max_seconds)
        limit = int(max_seconds * SAMPLE_RATE)
        stream = None
        if f.samplerate != SAMPLE_RATE:
            stream = soxr.ResampleStream(f.samplerate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
        parts, n = [], 0
        while True:
            try:
                block = f.read(BLOCK_FRAMES, dtype="float32", always_2d=True)
            except (sf.LibsndfileError, RuntimeError, ValueError) as e:
                raise BadAudio(f"cannot decode audio ({len(data)} bytes): {e}") from None
            last = len(block) < BLOCK_FRAMES
            mono = np.ascontiguousarray(block[:, 0] if f.channels == 1 else block.mean(axis=1, dtype=np.float32))
            if not np.isfinite(mono).all():
                raise BadAudio("audio has non-finite samples (NaN or inf)")
            out = mono if stream is None else stream.resample_chunk(mono, last=last)
            parts.append(np.array(out, dtype=np.float32))
            n += len(out)
            if n > limit:
                raise TooLong(n / SAMPLE_RATE, max_seconds, from_header=False)
            if last:
                break
    wave = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    if wave.size == 0:
        raise BadAudio("audio has no samples")
    return wave
