"""The Granite features (speechlm.model.encoders.granite) against an independent numpy computation and the real extractor's output."""  # noqa: E501

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers.audio_utils import mel_filter_bank, spectrogram, window_function

from speechlm.model.encoders.granite import GraniteFeatures as FeatureExtractor
from speechlm.model.encoders.granite import compute_deltas, num_feature_frames

REF = Path(__file__).parent / "assets" / "granite_features_ref.npz"


def _clip(n, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    return (0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(n)).astype(np.float32)


def _numpy_reference(wave: np.ndarray, fe: FeatureExtractor) -> np.ndarray:
    """Same recipe written with transformers' numpy spectrogram (framing, window, FFT done independently)."""
    mel_frames = len(wave) // fe.hop_length
    num_frames = 2 * -(-mel_frames // 2)
    needed = (num_frames - 1) * fe.hop_length + 1
    wave = np.pad(wave.astype(np.float64), (0, max(0, needed - len(wave))))
    window = window_function(fe.win_length, "hann", periodic=True, frame_length=fe.n_fft, center=True)
    fb = mel_filter_bank(fe.n_fft // 2 + 1, fe.num_mel_bins, 0.0, 8000.0, 16000, norm=None, mel_scale="htk")
    mel = spectrogram(
        wave,
        window,
        frame_length=fe.n_fft,
        hop_length=fe.hop_length,
        power=2.0,
        center=True,
        pad_mode="reflect",
        mel_filters=fb,
    )[:, :num_frames]  # [mels, T]
    logmel = np.log10(np.maximum(mel, 1e-10))
    logmel = np.maximum(logmel, logmel.max() - fe.logmel_floor_db) / 4 + 1
    padded = np.pad(logmel, ((0, 0), (1, 1)), mode="edge")
    deltas = (padded[:, 2:] - padded[:, :-2]) / 2
    feats = np.concatenate([logmel, deltas], axis=0).T  # [T, 160]
    return feats.reshape(-1, 320)


def test_matches_independent_numpy_computation():
    fe = FeatureExtractor()
    for n in (1600, 16000, 16000 + 77, 8321):
        got, mask = fe([_clip(n, seed=n)])
        ref = _numpy_reference(_clip(n, seed=n), fe)
        assert got.shape == (1, ref.shape[0], 320) and got.dtype == torch.float32
        assert mask.sum().item() == num_feature_frames(n) == ref.shape[0]
        np.testing.assert_allclose(got[0].numpy(), ref, atol=2e-4)


def test_batch_padding_and_mask():
    fe = FeatureExtractor()
    a, b = _clip(16000, 1), _clip(5000, 2)
    feats, mask = fe([a, b])
    assert feats.shape == (2, num_feature_frames(16000), 320)
    assert mask.dtype == torch.long
    assert mask[0].sum() == num_feature_frames(16000) and mask[1].sum() == num_feature_frames(5000)
    assert mask[1, : num_feature_frames(5000)].all() and not mask[1, num_feature_frames(5000) :].any()
    # the real (unpadded) frames of a clip don't depend on what it's batched with, except the last
    # frame pair, whose centered STFT window reaches into the padding (as in the original)
    alone, _ = fe([b])
    k = num_feature_frames(5000) - 2
    torch.testing.assert_close(feats[1, :k], alone[0, :k])


def test_compute_deltas_formula():
    x = torch.randn(3, 7, 20)
    n = 2  # win_length 5
    padded = torch.nn.functional.pad(x.reshape(1, -1, 20), (n, n), mode="replicate").reshape(3, 7, -1)
    ref = sum(i * (padded[..., n + i : n + i + 20] - padded[..., n - i : n - i + 20]) for i in (1, 2)) / 10
    torch.testing.assert_close(compute_deltas(x, 5), ref)


def test_settings_round_trip_and_errors():
    fe = FeatureExtractor(num_mel_bins=64, logmel_floor_db=6.0)
    again = FeatureExtractor.from_dict(fe.to_dict())
    assert again.to_dict() == fe.to_dict() and again.feature_size == 256
    with pytest.raises(ValueError, match="unknown"):
        FeatureExtractor.from_dict({"n_mels": 80})
    with pytest.raises(ValueError, match="1-D"):
        fe([np.zeros((2, 1600), np.float32)])
    with pytest.raises(ValueError, match="no samples"):
        fe([np.zeros(0, np.float32)])
    # shorter than the STFT's reflect padding: padded with silence to the smallest input (issue 36)
    short, mask = fe([np.full(100, 0.1, np.float32)])
    ref, _ = fe([np.concatenate([np.full(100, 0.1, np.float32), np.zeros(fe.min_samples - 100, np.float32)])])
    torch.testing.assert_close(short, ref, rtol=0, atol=0)
    assert fe.min_samples == fe.n_fft // 2 + 1 and mask.sum() == fe.num_feature_frames(fe.min_samples)


@pytest.mark.skipif(not REF.is_file(), reason="reference fixture not generated")
def test_matches_real_granite_extractor():
    """Fixture made by transformers' GraniteSpeech5FeatureExtractor + torchaudio (tests/model/assets/make_granite_features_ref.py)."""  # noqa: E501
    ref = np.load(REF)
    waves = [ref[f"wave{i}"] for i in range(int(ref["n"]))]
    feats, mask = FeatureExtractor()(waves)
    np.testing.assert_array_equal(mask.numpy(), ref["attention_mask"])
    # float32 FFTs in different libraries; features are O(1) and measured to agree within 8e-6
    np.testing.assert_allclose(feats.numpy(), ref["input_features"], atol=1e-4, rtol=0)
