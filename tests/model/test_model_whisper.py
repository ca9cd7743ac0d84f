"""SpeechLM with the Whisper family (tiny twin): placeholders, frozen encoder, export/reload, planner."""

import json

import pytest
import torch

from model_helpers import batch, tiny_config, train_steps, waves
from speechlm.model import build_model, from_pretrained, save_pretrained


def _logits(m, b):
    m.eval()
    with torch.no_grad():
        return m.label_logits(b["input_features"], b["feature_mask"], b["input_ids"], b["attention_mask"], b["labels"])[
            0
        ]


def whisper_config(**kw):
    return tiny_config(decoder="tiny/qwen3", encoder="tiny/whisper", **kw)


@pytest.fixture(scope="module")
def model():
    return build_model(whisper_config(stride=4))


def test_placeholder_count_equals_projector_output(model):
    m, stride = model, 4
    assert m.family.name == "whisper" and m.projector.norm.normalized_shape[0] == 64 * stride
    lengths = [1600, 1759, 16000, 16161, 23999]
    feats, mask = m.features(waves(lengths))
    assert feats.shape[-1] == 80
    _, emitted = m.encode_audio(feats, mask)
    assert (
        emitted.tolist() == [m.family.audio_token_count(n, stride) for n in lengths] == m.audio_lengths(mask).tolist()
    )


def test_frozen_encoder_stays_put_and_export_reloads(tmp_path):
    cfg = whisper_config(stride=2, calibrate=True)
    m = build_model(cfg)
    enc_before = {k: v.clone() for k, v in m.encoder.state_dict().items()}
    b = batch(m, waves([16000, 9000]))
    m.train()
    assert not m.encoder.training  # frozen: no dropout, whatever the model's mode
    train_steps(m, cfg.training, b, steps=3)
    assert all(torch.equal(v, m.encoder.state_dict()[k]) for k, v in enc_before.items())
    save_pretrained(m, tmp_path)
    meta = json.loads((tmp_path / "config.json").read_text())
    assert meta["encoder_family"] == "whisper" and meta["features"]["num_mel_bins"] == 80
    assert not (tmp_path / "encoder").exists()
    again = from_pretrained(tmp_path)
    assert again.family.name == "whisper"
    assert torch.equal(_logits(m, b), _logits(again, b))
    out = again.transcribe(waves([16000, 6000]), max_new_tokens=4)
    assert len(out) == 2 and all(isinstance(s, str) for s in out)


def test_trained_encoder_exports_and_reloads(tmp_path):
    cfg = whisper_config(stride=2, freeze_audio_encoder=False)
    m = build_model(cfg)
    b = batch(m, waves([16000, 9000]))
    m.train()
    assert m.encoder.training
    before = m.encoder.layers[0].fc1.weight.detach().clone()
    train_steps(m, cfg.training, b, steps=2)
    assert not torch.equal(before, m.encoder.layers[0].fc1.weight)
    save_pretrained(m, tmp_path)
    assert (tmp_path / "encoder" / "config.json").is_file()
    again = from_pretrained(tmp_path)
    assert torch.equal(m.encoder.layers[0].fc1.weight, again.encoder.layers[0].fc1.weight)
    assert torch.equal(_logits(m, b), _logits(again, b))


def test_planner_counts_only_the_whisper_encoder(model):
    from speechlm.config import Config, load
    from speechlm.plan import make_plan

    cfg = load(Config, "tiny", None, ["model.audio_model_id=tiny/whisper", "model.projector_pool_stride=4"])
    plan = make_plan(cfg)
    m = model
    assert plan["params"]["encoder_params"] == sum(p.numel() for p in m.encoder.parameters())
    assert plan["sources"]["encoder_checkpoint_params"] == plan["params"]["encoder_params"]  # decoder keys left out
    assert plan["memory_bytes"]["total"] > 0


def test_bundled_whisper_configs_count_offline(capsys, monkeypatch):
    from speechlm.commands.model import main as count_main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    count_main(["--count", "model.audio_model_id=openai/whisper-tiny.en", "model.text_model_id=tiny/qwen3"])
    rows = {line.split()[0]: line.split()[1:3] for line in capsys.readouterr().out.splitlines()[2:]}
    assert int(rows["encoder"][0].replace(",", "")) == 8_208_384  # the encoder alone, no decoder
    # projector: LayerNorm(384) + Linear(384, 4096) + Linear(4096, 64) (the tiny decoder's width)
    assert int(rows["projector"][0].replace(",", "")) == 2 * 384 + 384 * 4096 + 4096 + 4096 * 64 + 64
    from speechlm.model.encoders import family_for

    base = family_for("openai/whisper-base.en", allow_bundled=True).meta_encoder()
    assert sum(p.numel() for p in base.parameters()) == 20_590_592


def test_clips_over_30s_are_cut_into_windows_and_max_seconds_refuses_or_skips(tmp_path, model):
    import numpy as np
    import soundfile as sf

    from speechlm.config import ConfigError
    from speechlm.inference import LongForm, evaluate, transcribe_files

    m = model
    rng = np.random.default_rng(0)
    rows = []
    for name, seconds in (("short", 1.0), ("long", 30.5), ("longer", 41.0)):
        sf.write(tmp_path / f"{name}.wav", (0.1 * rng.standard_normal(int(16000 * seconds))).astype(np.float32), 16000)
        rows.append(json.dumps({"audio": f"{name}.wav", "text": "hello"}))
    (tmp_path / "bad.wav").write_bytes(b"RIFF....not audio")
    rows.append(json.dumps({"audio": "bad.wav", "text": "hello"}))
    m.cfg.max_new_tokens, before = 4, m.cfg.max_new_tokens
    try:
        # over the encoder's 30 s: cut into windows, each transcribed (the words of every window joined)
        texts = transcribe_files(
            m, [str(tmp_path / "short.wav"), str(tmp_path / "long.wav")], long_form=LongForm(window_seconds=10.0)
        )
        assert len(texts) == 2 and len(texts[1].split()) >= len(texts[0].split())
        with pytest.raises(ConfigError, match=r"longer.wav: 41.0 s is longer than max_seconds \(40 s\)"):
            transcribe_files(m, [str(tmp_path / "short.wav"), str(tmp_path / "longer.wav")], max_seconds=40)
        with pytest.raises(ConfigError, match=r"bad.wav: cannot decode audio"):
            transcribe_files(m, [str(tmp_path / "bad.wav")])
        (tmp_path / "set.jsonl").write_text("\n".join(rows) + "\n")
        result = evaluate(m, str(tmp_path / "set.jsonl"), max_seconds=40)
    finally:
        m.cfg.max_new_tokens = before
    assert result["skipped"] == 2 and [r["id"] for r in result["rows"]] == ["short", "long"]
