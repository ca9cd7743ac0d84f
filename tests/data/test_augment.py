"""speechlm.data.augment: each transform does what it says, draws depend only on (seed, epoch, clip id),
and every bad `data.augment` setting is a ConfigError naming its key."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import soundfile as sf
import torch

from paths import REPO
from speechlm.audio import SAMPLE_RATE
from speechlm.config import ConfigError, build
from speechlm.config.augment import AugmentConfig, NoiseAugment, ReverbAugment, SpeedAugment
from speechlm.data import augment as A


def speechlike(seconds=2.0, seed=0):
    """A voiced, syllable-modulated signal with pauses: power varies over time, as speech does."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    env = np.clip(np.sin(2 * np.pi * 3 * t), 0, None) ** 2
    voiced = 0.3 * np.sin(2 * np.pi * 180 * t) + 0.1 * np.sin(2 * np.pi * 1250 * t)
    x = env * voiced + 0.003 * rng.standard_normal(len(t))
    return x.astype(np.float32)


def broadband(seconds=2.0, seed=0):
    """Syllable-modulated noise: no periodicity, so a cross-correlation peaks only at the true lag."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.2 * np.clip(np.sin(2 * np.pi * 3 * t), 0.05, None) * rng.standard_normal(len(t))).astype(np.float32)


def snr_db(clean, noisy):
    return 10 * np.log10(A._power(clean) / A._power(noisy - clean))


def dominant_hz(x):
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return np.argmax(spec) * SAMPLE_RATE / len(x)


def lag_of(y, x, max_lag=400):
    """The lag (samples) at which y best matches x."""
    mid = slice(max_lag, len(x) - max_lag)
    scores = [float(np.dot(y[mid], x[max_lag - k : len(x) - max_lag - k])) for k in range(-max_lag, max_lag + 1)]
    return int(np.argmax(scores)) - max_lag


def cfg(**sections) -> AugmentConfig:
    return replace(AugmentConfig(enabled=True), **sections)


# ---------------------------------------------------------------------------------- transforms


@pytest.mark.parametrize("factor", [0.9, 1.1, 1.5])
def test_speed_changes_duration_and_pitch_by_the_factor(factor):
    t = np.arange(SAMPLE_RATE * 2) / SAMPLE_RATE
    tone = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    out = A.speed(tone, factor)
    assert abs(len(out) - len(tone) / factor) <= 1
    assert dominant_hz(out) == pytest.approx(440 * factor, abs=2)


@pytest.mark.parametrize("color", ["white", "pink", "brown"])
@pytest.mark.parametrize("target", [20.0, 10.0, 5.0, 0.0])
def test_noise_is_mixed_at_the_snr_asked_for(color, target):
    x = speechlike()
    noise = A.coloured_noise(len(x), color, np.random.default_rng(1))
    assert snr_db(x, A.mix_at_snr(x, noise, target)) == pytest.approx(target, abs=0.5)


def test_coloured_noise_has_its_spectral_slope():
    slopes = {}
    for color in ("white", "pink", "brown"):
        n = A.coloured_noise(1 << 16, color, np.random.default_rng(2))
        p = np.abs(np.fft.rfft(n)) ** 2
        f = np.arange(len(p))
        band = (f > 100) & (f < 10000)
        slopes[color] = np.polyfit(np.log(f[band]), np.log(p[band]), 1)[0]
    assert slopes["white"] == pytest.approx(0, abs=0.1)
    assert slopes["pink"] == pytest.approx(-1, abs=0.1)
    assert slopes["brown"] == pytest.approx(-2, abs=0.1)


def test_noise_from_a_folder_at_the_snr_asked_for(tmp_path):
    rng = np.random.default_rng(3)
    hum = (0.2 * np.sin(2 * np.pi * 50 * np.arange(44100 * 3) / 44100)).astype(np.float32)
    sf.write(tmp_path / "hum.wav", hum, 44100)
    (tmp_path / "sub").mkdir()
    sf.write(tmp_path / "sub" / "babble.flac", 0.1 * rng.standard_normal((8000, 2)), 8000)  # short: tiled
    (tmp_path / "readme.txt").write_text("not audio")  # not listed: not an audio file name
    aug = A.Augmenter(cfg(noise=NoiseAugment(prob=1.0, snr_db=[10.0, 10.0], dir=str(tmp_path))), seed=1)
    assert [p.rsplit("/", 1)[-1] for p in aug.noise_files] == ["hum.wav", "babble.flac"]
    x = speechlike(3.0)
    used = set()
    for i in range(8):
        y = aug(x, 0, f"clip{i}")
        assert len(y) == len(x)
        assert snr_db(x, y) == pytest.approx(10.0, abs=0.5)
        used.add(round(dominant_hz(y - x)))
    assert 50 in used and len(used) > 1  # both files were drawn


def test_an_undecodable_noise_file_is_a_counted_skip_with_deterministic_fallback(tmp_path, caplog):
    (tmp_path / "broken.wav").write_bytes(b"RIFF not really audio")
    aug = A.Augmenter(cfg(noise=NoiseAugment(prob=1.0, snr_db=[5.0, 5.0], dir=str(tmp_path))), seed=1)
    x = speechlike()
    y1, y2 = aug(x, 0, "a"), pickle.loads(pickle.dumps(aug))(x, 0, "a")
    assert aug.stats["bad_noise_files"] == 1 and "broken.wav" in caplog.text
    np.testing.assert_array_equal(y1, y2)
    assert snr_db(x, y1) == pytest.approx(5.0, abs=0.5)


@pytest.mark.parametrize("predelay", [0, 300])
def test_reverb_keeps_length_alignment_and_level(predelay):
    x = broadband()
    rir = A.synthetic_rir(np.random.default_rng(4), rt60_s=0.6, drr_db=3.0)
    rir = np.concatenate([np.zeros(predelay, np.float32), rir])  # a measured RIR starts after the travel time
    y = A.reverberate(x, rir)
    assert len(y) == len(x)
    assert lag_of(y, x) == 0
    assert A._power(y) == pytest.approx(A._power(x), rel=1e-3)
    assert snr_db(x, y) < 10  # the tail is really there


def test_block_convolution_equals_direct_convolution():
    rng = np.random.default_rng(8)
    for n, m in ((5000, 12800), (20000, 300), (1, 1), (16000, 4097)):
        x, h = rng.standard_normal(n).astype(np.float32), rng.standard_normal(m).astype(np.float32)
        np.testing.assert_allclose(A.fft_convolve(x, h), np.convolve(x, h)[:n], atol=2e-3)


def test_generated_noise_differs_per_clip_and_wraps_without_a_seam():
    aug = A.Augmenter(cfg(noise=NoiseAugment(prob=1.0, snr_db=[10.0, 10.0], colors=["white"])), seed=0)
    x = speechlike()
    n1, n2 = aug(x, 0, "a") - x, aug(x, 0, "b") - x
    assert abs(np.corrcoef(n1, n2)[0, 1]) < 0.1  # different stretches of the bank
    bank = aug._bank("brown")
    wrapped = A.cyclic(bank, len(bank) - 100, 300)
    np.testing.assert_array_equal(wrapped[100:], bank[:200])
    # periodic: the step across the seam is like any other step of brown noise
    assert abs(wrapped[100] - wrapped[99]) < 6 * np.std(np.diff(bank))


def test_synthetic_rir_decays_by_60_db_at_rt60_and_has_its_drr():
    rir = A.synthetic_rir(np.random.default_rng(5), rt60_s=0.5, drr_db=6.0)
    assert len(rir) == 8000 and rir[0] == 1.0
    tail = rir[1:].astype(np.float64)
    assert 10 * np.log10(1.0 / np.sum(tail**2)) == pytest.approx(6.0, abs=0.01)
    early, late = np.mean(tail[:400] ** 2), np.mean(tail[-800:] ** 2)
    assert 10 * np.log10(early / late) > 45


def test_rirs_from_a_folder_keep_alignment(tmp_path):
    rir = np.zeros(4000, np.float32)
    rir[120], rir[500], rir[1800] = 0.8, 0.3, -0.2  # travel delay, then two reflections
    sf.write(tmp_path / "room.wav", rir, SAMPLE_RATE)
    aug = A.Augmenter(cfg(reverb=ReverbAugment(prob=1.0, dir=str(tmp_path))), seed=0)
    x = broadband()
    y = aug(x, 0, "x")
    assert len(y) == len(x) and lag_of(y, x) == 0
    expected = A.reverberate(x, rir)
    np.testing.assert_allclose(y, expected, atol=1e-4)  # the file's RIR (FLAC/WAV round trip of 16-bit)


def test_gain_clipping_and_bandlimit():
    x = speechlike()
    c = cfg(gain=replace(AugmentConfig().gain, prob=1.0, db=[-6.0, -6.0]))
    assert np.max(np.abs(A.Augmenter(c, 0)(x, 0, "g"))) == pytest.approx(np.max(np.abs(x)) * 10 ** (-6 / 20), rel=1e-5)
    y = A.clip_peaks(x, 0.5)
    assert np.max(np.abs(y)) == pytest.approx(0.5 * np.max(np.abs(x)))
    assert np.mean(np.abs(y) < np.max(np.abs(y))) > 0.5  # the quiet part is untouched
    noise = A.coloured_noise(len(x), "white", np.random.default_rng(6))
    low = A.bandlimit(noise, 8000)
    p = np.abs(np.fft.rfft(low)) ** 2
    f = np.fft.rfftfreq(len(low), 1 / SAMPLE_RATE)
    assert len(low) == len(noise)
    assert p[f > 4200].sum() < 1e-3 * p[f < 3800].sum()


@pytest.mark.parametrize("name", [n for n, (f, s) in A.CODECS.items() if s in sf.available_subtypes(f)])
def test_codec_round_trip_keeps_length_and_alignment(name):
    x = broadband()
    y = A.codec(x, name, 0.5)
    assert len(y) == len(x) and lag_of(y, x) == 0
    assert 3 < snr_db(x, y) < 60  # lossy (mp3 drops much of white noise), but the same signal


def test_this_machine_has_the_default_codecs():
    # docs/benchmarks.md says which codecs libsndfile has here; the default list must work
    A.check_codecs(AugmentConfig().codec.formats, "data.augment.codec.formats")


def test_spec_masks_mask_the_same_bins_in_every_block_and_only_real_frames():
    feats = torch.randn(100, 320)  # Granite: [mel, delta] x 2 stacked frames, 80 bins each
    spec = replace(AugmentConfig().spec, time_masks=2, time_mask_max_s=0.2, freq_masks=2, freq_mask_max_bins=10)
    out = A.spec_masks(feats.clone(), 90, np.random.default_rng(7), spec, frames_per_second=50, num_mel_bins=80)
    changed = out != feats
    assert not changed[90:].any()
    cols = changed[:90].all(dim=0).reshape(4, 80)
    assert cols.any() and (cols == cols[0]).all()  # a band covers the same bins in all 4 blocks
    rows = changed[:, :80].all(dim=1)
    assert 0 < int(rows.sum()) <= 2 * 10


# ---------------------------------------------------------------------------------- determinism

FULL = dict(
    speed=SpeedAugment([0.9, 1.0, 1.1]),
    noise=NoiseAugment(prob=1.0, snr_db=[5.0, 20.0]),
    reverb=ReverbAugment(prob=1.0),
)


def test_draws_depend_on_seed_epoch_and_id_only():
    aug = A.Augmenter(cfg(**FULL), seed=44)
    x = speechlike()
    ref = {(e, c): aug(x, e, c) for e in (0, 1) for c in ("a", "b")}
    fresh = pickle.loads(pickle.dumps(A.Augmenter(cfg(**FULL), seed=44)))  # another worker, after a resume
    for e, c in [(1, "b"), (0, "a"), (1, "a"), (0, "b")]:  # another order
        np.testing.assert_array_equal(fresh(x, e, c), ref[(e, c)])
    assert not np.array_equal(ref[(0, "a")], ref[(1, "a")])
    assert not np.array_equal(ref[(0, "a")], ref[(0, "b")])
    assert not np.array_equal(A.Augmenter(cfg(**FULL), seed=45)(x, 0, "a"), ref[(0, "a")])


def test_transforms_draw_independently():
    # turning noise on or off must not change which speed factor a clip gets
    x = speechlike()
    a = A.Augmenter(cfg(speed=SpeedAugment([0.8, 1.0, 1.25])), seed=3)
    b = A.Augmenter(cfg(speed=SpeedAugment([0.8, 1.0, 1.25]), noise=NoiseAugment(prob=1.0)), seed=3)
    assert [len(a(x, 0, f"c{i}")) for i in range(12)] == [len(b(x, 0, f"c{i}")) for i in range(12)]
    assert len({len(a(x, 0, f"c{i}")) for i in range(12)}) == 3


@pytest.mark.slow  # a fresh interpreter imports torch: ~15 s on a loaded 2-core machine
def test_clip_seed_does_not_depend_on_python_hash_salt():
    # a resumed run is a new process with a new str-hash salt; this one's salt is random per run
    code = (
        "from speechlm.data.augment import ClipDraws; "
        "print(ClipDraws(44, 3, 'synthetic_000123')['noise'].integers(1 << 62))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == str(A.ClipDraws(44, 3, "synthetic_000123")["noise"].integers(1 << 62))


def test_speed_prob_is_the_share_of_clips_changed():
    x = speechlike(0.5)
    aug = A.Augmenter(cfg(speed=SpeedAugment([0.8], prob=0.3)), seed=0)
    changed = sum(len(aug(x, 0, f"c{i}")) != len(x) for i in range(300))
    assert 60 <= changed <= 120  # binomial(300, 0.3): mean 90, sd 8
    assert replace(cfg(speed=SpeedAugment([0.8], prob=0.0))).max_stretch == 1.0


def test_disabled_is_the_identity():
    x = speechlike()
    off = replace(cfg(**FULL), enabled=False)
    assert A.Augmenter(off, 0)(x, 0, "a") is x
    assert off.max_stretch == 1.0 and cfg(**FULL).max_stretch == pytest.approx(1 / 0.9)


def test_eval_conditions_are_exact_and_the_same_for_every_run(tmp_path):
    from speechlm.inference import condition

    assert condition(None) == ("", None)
    x = speechlike()
    suffix, noisy = condition(10.0)
    y = noisy(x, 0, "clip7")
    assert suffix == "+noise10dB" and snr_db(x, y) == pytest.approx(10.0, abs=0.5)
    np.testing.assert_array_equal(y, condition(10.0)[1](x, 0, "clip7"))
    suffix, room = condition(None, reverb=True)
    z = room(x, 0, "clip7")
    assert suffix == "+reverb" and len(z) == len(x) and snr_db(x, z) < 15
    assert condition(5.0, reverb=True)[0] == "+reverb+noise5dB"
    with pytest.raises(ConfigError, match="--noise-dir: no such folder"):
        condition(5.0, str(tmp_path / "musan"))


# ---------------------------------------------------------------------------------- config errors


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"speed": {"factors": [0.9, 0.0]}}, "data.augment.speed.factors[1]"),
        ({"speed": {"factors": [-1.0]}}, "data.augment.speed.factors[0]"),
        ({"speed": {"factors": []}}, "data.augment.speed.factors"),
        ({"speed": {"prob": -0.1}}, "data.augment.speed.prob"),
        ({"noise": {"snr_db": [20, 5]}}, "data.augment.noise.snr_db"),
        ({"noise": {"snr_db": [5]}}, "data.augment.noise.snr_db"),
        ({"noise": {"prob": 1.5}}, "data.augment.noise.prob"),
        ({"noise": {"colors": []}}, "data.augment.noise.colors"),
        ({"reverb": {"rt60_s": [0.0, 0.5]}}, "data.augment.reverb.rt60_s"),
        ({"reverb": {"drr_db": [10, 0]}}, "data.augment.reverb.drr_db"),
        ({"gain": {"db": [6, -6]}}, "data.augment.gain.db"),
        ({"clipping": {"level": [0.5, 1.5]}}, "data.augment.clipping.level"),
        ({"codec": {"compression": [0.9, 0.1]}}, "data.augment.codec.compression"),
        ({"bandlimit": {"sample_rates": [16000]}}, "data.augment.bandlimit.sample_rates[0]"),
        ({"spec": {"time_masks": -1}}, "data.augment.spec.time_masks"),
    ],
)
def test_bad_values_name_the_key(raw, key):
    c = build(AugmentConfig, dict(raw, enabled=True), prefix="data.augment")
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]") + ":"):
        A.Augmenter(c, seed=0)


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"codec": {"formats": ["aac"]}}, "data.augment.codec.formats[0]"),
        ({"noise": {"colors": ["purple"]}}, "data.augment.noise.colors[0]"),
        ({"speed": {"factor": [0.9]}}, "data.augment.speed.factor"),
    ],
)
def test_bad_names_name_the_key(raw, key):
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        build(AugmentConfig, raw, prefix="data.augment")


def test_missing_and_empty_folders_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"data.augment.noise.dir: no such folder"):
        A.Augmenter(cfg(noise=NoiseAugment(prob=0.5, dir=str(tmp_path / "musan"))), 0)
    (tmp_path / "rirs").mkdir()
    (tmp_path / "rirs" / "notes.txt").write_text("no audio here")
    with pytest.raises(ConfigError, match=r"data.augment.reverb.dir: no audio files in"):
        A.Augmenter(cfg(reverb=ReverbAugment(prob=0.5, dir=str(tmp_path / "rirs"))), 0)
    # a folder named for a transform that is off is not read
    A.Augmenter(cfg(noise=NoiseAugment(prob=0.0, dir=str(tmp_path / "musan"))), 0)


def test_a_codec_this_libsndfile_lacks_is_a_config_error(monkeypatch):
    # a libsndfile built without mpg123/lame lists no MPEG subtypes
    real = sf.available_subtypes
    monkeypatch.setattr(sf, "available_subtypes", lambda fmt=None: {} if fmt == "MP3" else real(fmt))
    c = cfg(codec=replace(AugmentConfig().codec, prob=0.1, formats=["vorbis", "mp3"]))
    with pytest.raises(ConfigError, match=r"data.augment.codec.formats\[1\]: .* cannot write mp3"):
        A.Augmenter(c, 0)
