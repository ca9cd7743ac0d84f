"""An upload decoded to 16 kHz mono with its cost bounded before it is paid.

`speechlm.audio.load` decodes a whole file and then resamples it: fine for a user's own files, but a
server's client chooses the header. A 40 KB WAV whose header says 1 Hz decodes to 20,000 s, and 600 s
of 96 kHz 8-channel FLAC silence is 2 GB of float32 before the duration is known. Here the header is
read first (sample rate, channels and length refused before any sample is decoded), then the file is
decoded in blocks: each block's channels averaged and fed to soxr's streaming resampler, so what is
held is one block and the 16 kHz output, and decoding stops as soon as the output passes the limit
(a header that understates the length gains nothing). The samples are those of `audio.load`: the
channel mean is per frame, soxr's stream gives its one-shot `resample`'s samples bit for bit, and the
level and mix rules of `audio_checks.prepare` (a float file beyond full scale is scaled to a peak of 1;
channels that cancel when averaged give the loudest one) are applied from statistics gathered while
decoding (tests/serve/test_serve_decode.py checks all of it against `audio.load`).
"""

from __future__ import annotations

import io
import logging

import numpy as np
import soundfile as sf
import soxr

from speechlm.audio import SAMPLE_RATE
from speechlm.audio_checks import CANCEL_DB, AudioError, check_format

BLOCK_FRAMES = 1 << 16  # frames decoded at a time: 16 MiB of float32 at 64 channels
UNKNOWN_LENGTH = 1 << 62  # libsndfile's frame count for a stream whose length the header does not give
log = logging.getLogger(__name__)


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
    """Refuse, before decoding, what the header alone shows to be no recording or too long: the
    sample rate and channel limits are `audio_checks`' (every route's)."""
    try:
        check_format(f.samplerate, f.channels)
    except AudioError as e:
        raise BadAudio(str(e)) from None
    if 0 < f.frames < UNKNOWN_LENGTH and f.frames / f.samplerate > max_seconds:
        raise TooLong(f.frames / f.samplerate, max_seconds, from_header=True)


class _Levels:
    """What `audio_checks.prepare` decides from the whole file, gathered block by block: the peak over
    every channel (beyond 1.0: scale down) and each channel's energy against the mix's (cancelling
    channels: transcribe the loudest alone)."""

    def __init__(self, channels: int):
        self.peak, self.mix, self.chan = 0.0, 0.0, np.zeros(channels)

    def add(self, block: np.ndarray, mono: np.ndarray) -> None:
        if block.size:
            self.peak = max(self.peak, float(np.abs(block).max()))
            self.chan += np.square(block, dtype=np.float64).sum(axis=0)
            self.mix += float(np.square(mono, dtype=np.float64).sum())

    def cancelled_channel(self) -> int | None:
        if len(self.chan) < 2:
            return None
        expected = float(np.sqrt(self.chan.sum())) / len(self.chan)
        got = float(np.sqrt(self.mix))
        if expected > 0 and got < expected * 10 ** (-CANCEL_DB / 20):
            return int(np.argmax(self.chan))
        return None


def decode(data: bytes, max_seconds: float) -> np.ndarray:
    """16 kHz mono float32 samples of an uploaded file (`audio.load`'s), at most `max_seconds` of them."""
    with _open(data) as f:
        check_header(f, max_seconds)
        levels = _Levels(f.channels)
        wave = _decode_blocks(f, data, max_seconds, channel=None, levels=levels)
        loudest = levels.cancelled_channel()
        if loudest is not None:
            log.warning(
                "upload: its %d channels cancel when averaged; transcribing channel %d alone", f.channels, loudest
            )
            f.seek(0)
            wave = _decode_blocks(f, data, max_seconds, channel=loudest, levels=None)
    if wave.size == 0:
        raise BadAudio("audio has no samples")
    if levels.peak > 1.0:  # resampling is linear: scaling after it is scaling before it
        log.warning("upload: samples reach %.3g, beyond full scale (1.0): scaled down to a peak of 1", levels.peak)
        wave = (wave / levels.peak).astype(np.float32)
    return wave


def _decode_blocks(f: sf.SoundFile, data: bytes, max_seconds: float, channel, levels) -> np.ndarray:
    """The file's mix (or one `channel`) at 16 kHz, decoded block by block through soxr's stream."""
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
        if channel is not None:
            mono = np.ascontiguousarray(block[:, channel])
        else:
            mono = np.ascontiguousarray(block[:, 0] if f.channels == 1 else block.mean(axis=1, dtype=np.float32))
        if not np.isfinite(mono).all() or not np.isfinite(block).all():
            raise BadAudio("audio has non-finite samples (NaN or inf)")
        if levels is not None:
            levels.add(block, mono)
        out = mono if stream is None else stream.resample_chunk(mono, last=last)
        parts.append(np.array(out, dtype=np.float32))
        n += len(out)
        if n > limit:
            raise TooLong(n / SAMPLE_RATE, max_seconds, from_header=False)
        if last:
            break
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)
