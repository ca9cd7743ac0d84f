"""What every route checks of a clip before it joins a batch: `speechlm transcribe`, `speechlm eval`, the
server, an exported model's `transcribe` and its pipeline. A bad clip gets a named error of its own
(`AudioError`), so it is refused alone and never fails the clips batched with it (docs/reliability.md,
"what each input gets"):

- a format no recording has: a sample rate outside MIN_SAMPLE_RATE..MAX_SAMPLE_RATE, more than
  MAX_CHANNELS channels (`check_format`; the server can ask it from the header, before decoding);
- no samples, NaN or inf, or not 1-D once mixed (`check_clip`): refused;
- float samples beyond full scale (an unnormalized float WAV; log-mel features of it are no speech the
  encoder has heard): scaled to a peak of 1, with a warning (`fit_level`);
- channels that cancel when averaged (one inverted: the mix far below what its channels would give):
  the loudest channel alone, with a warning (`mix_down`).

A clip shorter than the encoder's smallest input (one hop) is no error: the feature extractor pads it
with silence (speechlm.model.encoders.base.LogMelFeatures) and it is transcribed as the silence it is.

numpy and the standard library only: the export carries this file verbatim (speechlm.model.folder.generate).
"""

from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger("speechlm.audio")

SAMPLE_RATE = 16_000  # every clip, everywhere in speechlm: 1-D float32 mono at this rate (docs/design.md)
MIN_SAMPLE_RATE = 1_000  # below: no speech band survives (a header saying 1 Hz is a decode bomb)
MAX_SAMPLE_RATE = 768_000  # the highest rate audio interfaces record at
MAX_CHANNELS = 64  # a large microphone array; more is no recording
CANCEL_DB = 20.0  # a mix this far below its channels' (uncorrelated) sum: the channels cancel


class AudioError(ValueError):
    """Audio that cannot be used: undecodable bytes, an impossible format, no samples, non-finite samples."""


def check_format(sample_rate, channels: int = 1, name: str = "audio") -> None:
    """Refuse a sample rate or channel count no recording has (AudioError naming `name`)."""
    if not MIN_SAMPLE_RATE <= sample_rate <= MAX_SAMPLE_RATE:
        raise AudioError(f"{name}: sample rate {sample_rate} Hz is outside {MIN_SAMPLE_RATE}-{MAX_SAMPLE_RATE} Hz")
    if not 1 <= channels <= MAX_CHANNELS:
        raise AudioError(f"{name}: {channels} channels (at most {MAX_CHANNELS})")


def _finite(wave: np.ndarray, name: str) -> None:
    if wave.size == 0:
        raise AudioError(f"{name}: no samples")
    if not np.isfinite(wave).all():
        raise AudioError(f"{name}: non-finite samples (NaN or inf)")


def fit_level(wave: np.ndarray, name: str = "audio") -> np.ndarray:
    """`wave` scaled to a peak of 1 when it goes beyond full scale (a float recording), with a warning."""
    peak = float(np.abs(wave).max()) if wave.size else 0.0
    if peak <= 1.0:
        return wave
    log.warning("%s: samples reach %.3g, beyond full scale (1.0): scaled down to a peak of 1", name, peak)
    return (wave / peak).astype(np.float32)


def mix_down(wave: np.ndarray, name: str = "audio") -> np.ndarray:
    """[n] or [n, channels] -> [n] float32: the channels' average, unless they cancel in it (the mix
    CANCEL_DB below what uncorrelated channels give): then the loudest channel alone, with a warning."""
    wave = np.asarray(wave, dtype=np.float32)
    if wave.ndim == 1:
        return wave
    if wave.ndim != 2:
        raise AudioError(f"{name}: expected audio of shape [n] or [n, channels], got {wave.shape}")
    mix = wave.mean(axis=1, dtype=np.float32)
    if wave.shape[1] < 2 or wave.shape[0] == 0:
        return mix
    rms = np.sqrt(np.mean(np.square(wave, dtype=np.float64), axis=0))
    expected = float(np.sqrt(np.sum(rms**2))) / wave.shape[1]
    got = float(np.sqrt(np.mean(np.square(mix, dtype=np.float64))))
    if expected > 0 and got < expected * 10 ** (-CANCEL_DB / 20):
        loudest = int(np.argmax(rms))
        log.warning(
            "%s: its %d channels cancel when averaged (the mix is %.0f dB below them: one is inverted?); "
            "transcribing channel %d alone",
            name,
            wave.shape[1],
            20 * np.log10(expected / max(got, 1e-30)),
            loudest,
        )
        return np.ascontiguousarray(wave[:, loudest])
    return mix


def prepare(wave: np.ndarray, sample_rate, name: str = "audio") -> np.ndarray:
    """Decoded samples ([n] or [n, channels], any rate) -> mono float32 at the same rate, checked:
    the format, finite samples, the level and the mix (see the module docstring). Resample after."""
    wave = np.asarray(wave, dtype=np.float32)
    check_format(sample_rate, wave.shape[1] if wave.ndim == 2 else 1, name)
    _finite(wave, name)
    return mix_down(fit_level(wave, name), name)


def check_clip(wave, name: str = "clip") -> np.ndarray:
    """A 16 kHz mono clip as a batch takes it (1-D float32, contiguous), or AudioError naming `name`:
    not 1-D, no samples, NaN or inf."""
    wave = np.ascontiguousarray(wave, dtype=np.float32)
    if wave.ndim != 1:
        raise AudioError(f"{name}: expected 1-D mono audio, got shape {wave.shape}")
    _finite(wave, name)
    return wave


def check_clips(waves) -> list[np.ndarray]:
    """`check_clip` of each of a batch call's clips (`clip 3: ...`), before any of them is transcribed."""
    return [check_clip(w, f"clip {i}") for i, w in enumerate(waves)]
