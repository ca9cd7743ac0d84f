"""speechlm/audio_checks.py, through speechlm.audio.load as every route decodes: an impossible format
refused by name; float audio beyond full scale and channels that cancel when mixed (issue 36,
finding 13: both gave empty text with no word) fixed, with a warning; ordinary audio untouched."""

from __future__ import annotations

import io
import logging
import re

import numpy as np
import pytest
import soundfile as sf

from speechlm import audio, audio_checks


def _speech(n=16000, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    return (0.3 * np.sin(2 * np.pi * 220 * t) * (1 + 0.5 * rng.standard_normal(n))).astype(np.float32) * 0.5


def _wav(wave, sr=16000, subtype="FLOAT") -> bytes:
    buf = io.BytesIO()
    sf.write(buf, wave, sr, format="WAV", subtype=subtype)
    return buf.getvalue()


def test_float_audio_beyond_full_scale_is_scaled_to_a_peak_of_one(caplog):
    x = _speech()
    caplog.set_level(logging.WARNING, logger="speechlm.audio")
    loud = audio.load(_wav(1000 * x), "loud.wav")
    assert np.abs(loud).max() == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_allclose(loud, x / np.abs(x).max(), rtol=1e-5, atol=1e-6)
    assert "loud.wav: samples reach" in caplog.text and "beyond full scale" in caplog.text
    caplog.clear()
    np.testing.assert_array_equal(audio.load(_wav(x)), x)  # within full scale: untouched, no warning
    assert not caplog.text


def test_channels_that_cancel_give_the_loudest_channel_not_silence(caplog):
    x = _speech()
    caplog.set_level(logging.WARNING, logger="speechlm.audio")
    wave = audio.load(_wav(np.stack([x, -x], axis=1)), "phase.wav")
    np.testing.assert_array_equal(wave, x)
    assert "phase.wav: its 2 channels cancel when averaged" in caplog.text
    caplog.clear()
    # ordinary stereo, and one loud channel among 16 quiet ones: the mean, no warning
    y = _speech(seed=1)
    np.testing.assert_allclose(audio.load(_wav(np.stack([x, 0.5 * y], axis=1))), (x + 0.5 * y) / 2, atol=1e-7)
    many = np.zeros((16000, 16), np.float32)
    many[:, 3] = x
    np.testing.assert_allclose(audio.load(_wav(many)), x / 16, atol=1e-7)
    assert not caplog.text


@pytest.mark.parametrize(
    "wave,sr,message",
    [
        (np.zeros(100, np.float32), 1, "sample rate 1 Hz is outside 1000-768000 Hz"),  # a decode bomb's header
        (np.zeros((100, 65), np.float32), 16000, "65 channels (at most 64)"),
        (np.zeros(0, np.float32), 16000, "no samples"),
        (np.array([0.1, np.inf], np.float32), 16000, "non-finite"),
    ],
)
def test_impossible_audio_is_refused_by_name(wave, sr, message):
    with pytest.raises(audio.AudioError, match=re.escape(f"upload.wav: {message}")):
        audio.load(_wav(wave, sr), "upload.wav")


def test_the_format_can_be_checked_from_a_header_before_decoding():
    info = sf.info(io.BytesIO(_wav(np.zeros(8000, np.float32), 8000)))
    audio.check_format(info.samplerate, info.channels, "ok.wav")  # 8 kHz mono: fine
    for sr, ch in ((999, 1), (768_001, 1), (16000, 0), (16000, 65)):
        with pytest.raises(audio.AudioError, match="x.wav"):
            audio.check_format(sr, ch, "x.wav")
    audio.check_format(audio.MIN_SAMPLE_RATE, audio.MAX_CHANNELS)
    audio.check_format(audio.MAX_SAMPLE_RATE, 1)


def test_check_clips_names_the_bad_clip_of_a_batch_call():
    good = np.zeros(160, np.float64)
    out = audio_checks.check_clips([good, [0.1, 0.2]])
    assert [w.dtype for w in out] == [np.float32, np.float32] and out[0].flags.c_contiguous
    with pytest.raises(audio.AudioError, match="clip 1: non-finite"):
        audio_checks.check_clips([good, np.array([np.nan])])
    with pytest.raises(audio.AudioError, match="clip 0: expected 1-D mono audio"):
        audio_checks.check_clips([np.zeros((2, 160))])
    with pytest.raises(audio.AudioError, match="clip 2: no samples"):
        audio_checks.check_clips([good, good, np.zeros(0)])
