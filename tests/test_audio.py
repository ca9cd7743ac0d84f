"""speechlm.audio: decode, resample, FLAC round trip, and clear errors on bad audio."""

import io

import numpy as np
import pytest
import soundfile as sf

from speechlm.audio import SAMPLE_RATE, AudioError, decode, encode_flac, load, to_mono_16k


def _tone(sr, seconds=0.5, channels=1):
    t = np.arange(int(sr * seconds)) / sr
    x = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    return np.stack([x] * channels, axis=1) if channels > 1 else x


@pytest.mark.parametrize("fmt,subtype", [("WAV", "PCM_16"), ("FLAC", "PCM_16"), ("OGG", "VORBIS")])
def test_load_any_format_stereo_44k_to_mono_16k(fmt, subtype):
    buf = io.BytesIO()
    sf.write(buf, _tone(44100, channels=2), 44100, format=fmt, subtype=subtype)
    wave = load(buf.getvalue())
    assert wave.dtype == np.float32 and wave.ndim == 1
    assert abs(len(wave) - SAMPLE_RATE // 2) <= 2
    # the 440 Hz tone survives resampling: its spectral peak is at 440 Hz
    spec = np.abs(np.fft.rfft(wave))
    assert abs(np.argmax(spec) * SAMPLE_RATE / len(wave) - 440) < 5


def test_mono_is_channel_mean():
    x = np.stack([np.ones(100, np.float32), -np.ones(100, np.float32) * 0.5], axis=1)
    np.testing.assert_allclose(to_mono_16k(x, SAMPLE_RATE), 0.25)


def test_flac_round_trip_is_exact_to_16_bits_and_deterministic():
    x = _tone(SAMPLE_RATE)
    a, b = encode_flac(x), encode_flac(x.copy())
    assert a == b
    y, sr = decode(a)
    assert sr == SAMPLE_RATE
    assert np.max(np.abs(y - x)) <= 1 / 32768 + 1e-7
    # out-of-range samples clip instead of wrapping around
    y, _ = decode(encode_flac(np.array([1.5, -1.5, 0.0], np.float32)))
    assert y[0] > 0.99 and y[1] == -1.0


def test_bad_audio_raises_audio_error(tmp_path):
    with pytest.raises(AudioError, match="cannot decode"):
        load(b"definitely not audio")
    # a missing file is said as such (issue 35), still an AudioError
    with pytest.raises(AudioError, match="not found"):
        load(tmp_path / "missing.flac")
    buf = io.BytesIO()
    sf.write(buf, np.zeros(0, np.float32), SAMPLE_RATE, format="WAV")
    with pytest.raises(AudioError, match="no samples"):
        load(buf.getvalue())
    buf = io.BytesIO()
    sf.write(buf, np.array([0.1, np.nan, 0.2], np.float32), SAMPLE_RATE, format="WAV", subtype="FLOAT")
    with pytest.raises(AudioError, match="non-finite"):
        load(buf.getvalue())
