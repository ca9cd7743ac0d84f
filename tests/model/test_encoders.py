"""Encoder families: Whisper's features and variable-length encoder against transformers' stock ones,
batch independence, loading from both checkpoint classes, token counts per family, clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperModel
from transformers.models.whisper.modeling_whisper import WhisperEncoder

from speechlm.config import ConfigError, DataSet
from speechlm.model import ids, parts, tiny
from speechlm.model.encoders import family_for, family_from_config
from speechlm.model.encoders.granite import GraniteSpeech5Family
from speechlm.model.encoders.whisper import VarLenWhisperEncoder, WhisperFamily

SR = 16000
# a full 30 s clip, one 100 samples short of it (the stock extractor's reflect padding reaches it),
# lengths on and off the hop, and the shortest clip with a frame
LENGTHS = (16000, 8321, 48077, 480000, 479900, 161)


def _speechlike(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / SR
    f0 = rng.uniform(100, 300)
    w = sum(np.sin(2 * np.pi * f0 * h * t) / h for h in range(1, 5)) * (1 + np.sin(2 * np.pi * 3 * t))
    return (0.1 * w + 0.02 * rng.standard_normal(n)).astype(np.float32)


@pytest.fixture(scope="module")
def whisper():
    return family_for("tiny/whisper")


@pytest.fixture(scope="module")
def granite():
    return family_for("tiny/granite_speech5")


@pytest.fixture(scope="module")
def encoder(whisper):
    return parts.load_encoder(whisper, "tiny/whisper", torch.float32).eval()


# --------------------------------------------------------------------------- features


def test_whisper_features_match_transformers_extractor(whisper):
    """Each clip's frames equal transformers.WhisperFeatureExtractor's (default: padded to 30 s) frames
    for that clip: identical to its torch path, within 1e-4 of its numpy path (float64 FFT)."""
    waves = [_speechlike(n, i) for i, n in enumerate(LENGTHS)]
    feats, mask = whisper.features(waves)
    hf = WhisperFeatureExtractor(feature_size=80)
    ref = hf(waves, sampling_rate=SR, return_tensors="np", return_attention_mask=True)
    assert feats.dtype == torch.float32 and feats.shape == (len(waves), 3000, 80)
    np.testing.assert_array_equal(mask.numpy(), ref["attention_mask"])  # ceil(N / 160) frames each
    for i, (w, n) in enumerate(zip(waves, mask.sum(1).tolist())):
        assert n == -(-LENGTHS[i] // 160) == whisper.features.num_feature_frames(LENGTHS[i])
        np.testing.assert_allclose(feats[i, :n].numpy(), ref["input_features"][i][:, :n].T, atol=1e-5, rtol=0)
        padded = np.pad(w, (0, 480000 - len(w)))[None]
        numpy_ref = hf._np_extract_fbank_features(padded, "cpu")[0][:, :n].T
        np.testing.assert_allclose(feats[i, :n].numpy(), numpy_ref, atol=1e-4, rtol=0)
        alone, alone_mask = whisper.features([w])
        assert alone.shape[1] == n and alone_mask.all()
        torch.testing.assert_close(alone[0], feats[i, :n], rtol=0, atol=0)  # batch mates change nothing


def test_a_clip_shorter_than_the_smallest_input_is_padded_with_silence(whisper, granite):
    """Issue 36: a 5-sample clip failed its whole batch; it is padded to the encoder's smallest input
    (Granite's subsampling needs 4 feature frames) and gives that padded clip's features."""
    rng = np.random.default_rng(0)
    for family in (whisper, granite):
        n = family.features.min_samples
        assert family.encoder_frames(family.features.num_feature_frames(n)) >= 1
        tiny = (0.1 * rng.standard_normal(5)).astype(np.float32)
        padded = np.concatenate([tiny, np.zeros(n - 5, np.float32)])
        good = (0.1 * rng.standard_normal(16000)).astype(np.float32)
        feats, mask = family.features([tiny, good])
        ref, ref_mask = family.features([padded, good])
        torch.testing.assert_close(feats, ref, rtol=0, atol=0)
        assert mask.tolist() == ref_mask.tolist() and mask[0].sum() == family.features.num_feature_frames(n)
    assert whisper.features.min_samples == 160  # one hop: one frame through the convs
    # the tiny Granite pools twice: 4 feature frames (7 hops of mel frames) give its first output frame
    assert (
        granite.features.min_samples == 7 * 160
        and granite.encoder_frames(granite.features.num_feature_frames(6 * 160)) == 0
    )


def test_whisper_features_refuse_bad_clips(whisper):
    with pytest.raises(ValueError, match="longer than the Whisper encoder's 30 s limit"):
        whisper.features([np.zeros(480001, np.float32)])
    with pytest.raises(ValueError, match="no samples"):
        whisper.features([np.zeros(0, np.float32)])
    with pytest.raises(ValueError, match="1-D"):
        whisper.features([np.zeros((2, 1600), np.float32)])


# --------------------------------------------------------------------------- encoder


@torch.no_grad()
def test_variable_length_encoder_equals_stock_on_30s(encoder):
    stock = WhisperEncoder(encoder.config).eval()
    stock.load_state_dict(encoder.state_dict())
    x = torch.randn(2, 80, 3000)
    ref = stock(x).last_hidden_state
    out = encoder(x)
    torch.testing.assert_close(out.last_hidden_state, ref, rtol=0, atol=1e-5)
    masked = encoder(x, attention_mask=torch.ones(2, 3000, dtype=torch.long))
    torch.testing.assert_close(masked.last_hidden_state, ref, rtol=0, atol=1e-5)
    assert masked.attention_mask.shape == (2, 1500) and masked.attention_mask.all()


@torch.no_grad()
def test_clip_alone_equals_clip_in_a_batch_of_longer_clips(whisper, encoder):
    short, mid, long_ = _speechlike(24_321, 1), _speechlike(100_000, 2), _speechlike(300_160, 3)  # odd mel count first
    feats, mask = whisper.features([long_, short, mid])
    hidden, frames = whisper.encode(encoder, feats, mask)
    assert frames.tolist() == [
        whisper.encoder_frames(whisper.features.num_feature_frames(len(w))) for w in (long_, short, mid)
    ]
    for i, w in ((1, short), (2, mid)):
        f, m = whisper.features([w])
        alone, n = whisper.encode(encoder, f, m)
        assert alone.shape[1] == n.item() == frames[i].item()
        torch.testing.assert_close(hidden[i, : frames[i]], alone[0], rtol=0, atol=1e-5)


def test_loads_only_the_encoder_from_either_checkpoint_class(tmp_path, whisper, caplog):
    full = WhisperForConditionalGeneration.from_pretrained(ids.resolve("tiny/whisper"))
    base_dir = tmp_path / "whisper_model"
    WhisperModel(full.config).save_pretrained(base_dir)
    base = WhisperModel.from_pretrained(base_dir)
    for src, ref in ((ids.resolve("tiny/whisper"), full.model.encoder), (str(base_dir), base.encoder)):
        with caplog.at_level("INFO"):
            enc = parts.load_encoder(family_for(src), src, torch.float32)
        assert isinstance(enc, VarLenWhisperEncoder)
        want = ref.state_dict()
        got = enc.state_dict()
        assert set(got) == set(want)
        assert all(torch.equal(got[k], want[k]) for k in want), src
        assert not any("decoder" in k for k in got)
    assert "decoder weights are ignored on purpose" in caplog.text


# --------------------------------------------------------------------------- arithmetic and registry


def test_token_counts_per_family(whisper):
    granite = family_for("tiny/granite_speech5")
    assert isinstance(granite, GraniteSpeech5Family) and isinstance(whisper, WhisperFamily)
    # Granite: 16000 samples -> 100 mel frames -> 50 stacked -> 25 -> 12 (two subsampling blocks)
    assert granite.conv_layers() == [[0, 2, 2], [0, 2, 2]]
    assert [granite.audio_token_count(16000, k) for k in (1, 2, 3)] == [12, 6, 4]
    assert (
        granite.audio_token_count(16160, 1) == 12 and granite.audio_token_count(16640, 1) == 13
    )  # 104 -> 52 -> 26 -> 13
    # Whisper: ceil(N / 160) mel frames -> conv1 (k3 s1 p1) -> conv2 (k3 s2 p1): ceil(mel / 2)
    assert whisper.conv_layers() == [[1, 3, 1], [1, 3, 2]]
    assert [whisper.audio_token_count(16000, k) for k in (1, 2, 4)] == [50, 25, 12]
    assert whisper.audio_token_count(16001, 1) == 51  # 101 mel frames -> 51
    assert whisper.audio_token_count(480000, 4) == 375 and whisper.max_seconds == 30.0
    for n in (161, 320, 321, 16000, 16161):
        mel = -(-n // 160)
        assert whisper.encoder_frames(mel) == -(-mel // 2)


def test_token_counts_equal_what_each_encoder_emits(encoder, whisper):
    granite = family_for("tiny/granite_speech5")
    genc = parts.load_encoder(granite, "tiny/granite_speech5", torch.float32)
    lengths = (1600, 1759, 16000, 16161, 23999)
    waves = [_speechlike(n, n) for n in lengths]
    with torch.no_grad():
        for fam, enc in ((granite, genc), (whisper, encoder)):
            feats, mask = fam.features(waves)
            _, frames = fam.encode(enc, feats, mask)
            assert frames.tolist() == [fam.encoder_frames(fam.features.num_feature_frames(n)) for n in lengths]
            assert frames.tolist() == fam.encoder_frames(mask.sum(-1)).tolist()


def test_unknown_encoder_type_lists_the_supported_ones(tmp_path):
    from transformers import Wav2Vec2Config

    Wav2Vec2Config().save_pretrained(tmp_path)
    with pytest.raises(ConfigError) as e:
        family_for(str(tmp_path))
    msg = str(e.value)
    assert "model.audio_model_id" in msg and "'wav2vec2'" in msg
    assert "granite_speech5" in msg and "whisper" in msg
    with pytest.raises(ConfigError, match="model.audio_model_id"):
        family_for(str(tmp_path / "nothing-here"))


def test_frozen_mode_rules(encoder, whisper):
    granite = family_for("tiny/granite_speech5")
    genc = parts.load_encoder(granite, "tiny/granite_speech5", torch.float32)
    for trainable in (False, True):
        granite.set_mode(genc, True, trainable)
        assert not any(m.training for m in genc.modules())  # BatchNorm statistics never move
    whisper.set_mode(encoder, True, False)
    assert not encoder.training
    whisper.set_mode(encoder, True, True)
    assert encoder.training
    whisper.set_mode(encoder, False, True)
    assert not encoder.training


def test_family_pickles_and_survives_saved_settings(whisper):
    import pickle

    again = pickle.loads(pickle.dumps(whisper))
    w = [_speechlike(5000, 0)]
    torch.testing.assert_close(again.features(w)[0], whisper.features(w)[0])
    restored = family_from_config(whisper.config, features_settings=whisper.features.to_dict())
    assert restored.features.to_dict() == whisper.features.to_dict()


# --------------------------------------------------------------------------- the 30 s limit at start


def test_shard_set_longer_than_whisper_limit_stops_at_start(tmp_path, whisper):
    from data_helpers import write_set
    from speechlm import text
    from speechlm.data import Collator, EvalLoader, TrainLoader

    tok = text.load_tokenizer(str(tiny.ensure("qwen3")), "<audio>")
    col = Collator(tok, prompt="Transcribe the audio.", audio_token="<audio>", family=whisper, pool_stride=1)
    ok = write_set(tmp_path, "short", [2], min_s=0.5, max_s=1.0, audio=False)
    long_ = write_set(tmp_path, "long", [2, 1], min_s=30.5, max_s=31.0, audio=False)
    TrainLoader([DataSet(str(ok))], col, batch_size=2, num_workers=0)  # fine
    with pytest.raises(ConfigError) as e:
        TrainLoader([DataSet(str(ok)), DataSet(str(long_))], col, batch_size=2, num_workers=0)
    msg = str(e.value)
    assert "data.train[1]" in msg and str(long_) in msg and "30 s limit" in msg and "whisper" in msg
    with pytest.raises(ConfigError, match=r"data.eval\[0\].*30 s limit"):
        EvalLoader([DataSet(str(long_))], col, batch_size=2)
    granite = Collator(
        tok,
        prompt="Transcribe the audio.",
        audio_token="<audio>",
        family=family_for("tiny/granite_speech5"),
        pool_stride=1,
    )
    TrainLoader([DataSet(str(long_))], granite, batch_size=2, num_workers=0)  # Granite has no such limit


def test_registry_matches_the_family_modules():
    import importlib

    from speechlm.model.encoders import FAMILIES, family_class

    for name, (module, types) in FAMILIES.items():
        fam = importlib.import_module(module).FAMILY
        assert fam.name == name and all(family_class(t) is fam for t in types)


def test_trainer_stops_at_start_on_a_set_over_the_limit(tmp_path):
    """Before any process group, run dir or model: the manifests alone decide."""
    import time

    from data_helpers import write_set
    from speechlm import config as config_mod
    from speechlm.config import Config
    from speechlm.train.loop import Trainer

    long_ = write_set(tmp_path, "long", [1], min_s=30.5, max_s=31.0, audio=False)
    ok = write_set(tmp_path, "ok", [1], split="eval", min_s=1.0, max_s=2.0, audio=False)
    cfg = config_mod.load(
        Config,
        "tiny",
        None,
        [
            "model.audio_model_id=tiny/whisper",
            f"training.output_dir={tmp_path / 'runs'}",
            f"data.train=[{{path: {long_}, split: train}}]",
            f"data.eval=[{{path: {ok}, split: eval}}]",
        ],
    )
    t0 = time.perf_counter()
    with pytest.raises(
        ConfigError, match=r"data.train\[0\]: shard set .*long .*up to 3\d\.\d\d s.*whisper encoder's 30 s limit"
    ):
        Trainer(cfg).setup()
    assert time.perf_counter() - t0 < 30 and not (tmp_path / "runs").exists()
