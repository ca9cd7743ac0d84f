"""The server's upload decoder (speechlm/serve/decode.py): `audio.load`'s samples, every route's level
and mix rules, its memory bounded by a block (issue 36, findings 2 and 13)."""

from __future__ import annotations

import io
import tracemalloc

import numpy as np
import pytest
import soundfile as sf


def test_decoding_is_audio_loads_and_bounded_in_memory():
    from speechlm import audio
    from speechlm.serve.decode import BadAudio, decode

    rng = np.random.default_rng(0)
    for rate, channels, fmt in ((16000, 1, "WAV"), (44100, 2, "FLAC"), (8000, 3, "WAV"), (96000, 8, "FLAC")):
        buf = io.BytesIO()
        sf.write(buf, (rng.standard_normal((rate * 3 + 7, channels)) * 0.1).astype(np.float32), rate, format=fmt)
        data = buf.getvalue()
        assert np.array_equal(decode(data, 60), audio.load(data)), (rate, channels)  # the same samples, bit for bit
    buf = io.BytesIO()  # 40 s of 96 kHz x 8 channels: audio.load holds all of it at once
    sf.write(buf, np.zeros((96000 * 40, 8), np.int16), 96000, format="FLAC", subtype="PCM_16")
    data = buf.getvalue()
    peaks = []
    for fn in (lambda: audio.load(data), lambda: decode(data, 60)):  # noqa: B023 -- called at once
        tracemalloc.start()
        fn()
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < peaks[0] / 8 and peaks[1] < 40 * 2**20, peaks  # 123 MB of samples vs the output + a block
    with pytest.raises(BadAudio, match="its header says it is 40.0 s"):
        decode(data, 39)  # refused before decoding


def test_decoding_applies_the_level_and_mix_rules_of_every_route():
    """Finding 13 on the server's route: a float file beyond full scale and stereo whose channels cancel
    give `audio.load`'s samples (scaled to a peak of 1; the loudest channel alone), not silence."""
    from speechlm import audio
    from speechlm.serve.decode import decode

    rng = np.random.default_rng(1)
    speech = (rng.standard_normal(44100 * 2) * 0.3).astype(np.float32)
    cases = {
        "loud float": (np.stack([speech * 9, speech * 7], axis=1), 44100),
        "inverted stereo": (np.stack([speech, -speech * 0.99], axis=1), 44100),
        "loud inverted 16k": (np.stack([speech * 4, -speech * 4], axis=1), 16000),
    }
    for name, (wave, rate) in cases.items():
        buf = io.BytesIO()
        sf.write(buf, wave, rate, format="WAV", subtype="FLOAT")
        data = buf.getvalue()
        got, want = decode(data, 60), audio.load(data)
        # float32 rounding of one scale applied before vs after a linear resampler: a few ulps of 1.0
        assert got.shape == want.shape and np.abs(got - want).max() < 1e-5, name
        assert np.abs(got).max() <= 1.0 + 1e-6 and np.sqrt(np.mean(got**2)) > 0.05, name  # not silence
