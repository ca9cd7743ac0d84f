"""SpeechLM with the Whisper family (tiny twin): placeholders, frozen encoder, export/reload, planner."""
import json

import pytest
import torch

from model_helpers import batch, tiny_config, train_steps, waves
from speechlm.model import SpeechLM, build_model


def _logits(m, b):
    m.eval()
    with torch.no_grad():
        return m.label_logits(b["input_features"], b["feature_mask"], b["input_ids"], b["attention_mask"], b["labels"])[0]


def whisper_config(**kw):
    return tiny_config(decoder="tiny/qwen3", encoder="tiny/whisper", **kw)


@pytest.mark.parametrize("stride", [1, 4])
def test_placeholder_count_equals_projector_output(stride):
    m = build_model(whisper_config(stride=stride))
    assert m.family.name == "whisper" and m.projector.norm.normalized_shape[0] == 64 * stride
    lengths = [1600, 1759, 16000, 16161, 23999]
    feats, mask = m.features(waves(lengths))
    assert feats.shape[-1] == 80
    _, emitted = m.encode_audio(feats, mask)
    assert emitted.tolist() == [m.family.audio_token_count(n, stride) for n in lengths] == m.audio_lengths(mask).tolist()


def test_frozen_encoder_stays_put_and_export_reloads(tmp_path):
    cfg = whisper_config(stride=2, calibrate=True)
    m = build_model(cfg)
    enc_before = {k: v.clone() for k, v in m.encoder.state_dict().items()}
    b = batch(m, waves([16000, 9000]))
    m.train()
    assert not m.encoder.training  # frozen: no dropout, whatever the model's mode
    train_steps(m, cfg.training, b, steps=3)
    assert all(torch.equal(v, m.encoder.state_dict()[k]) for k, v in enc_before.items())
    m.save_pretrained(tmp_path)
    meta = json.loads((tmp_path / "speechlm.json").read_text())
    assert meta["encoder_family"] == "whisper" and meta["features"]["num_mel_bins"] == 80
    assert not (tmp_path / "encoder").exists()
    again = SpeechLM.from_pretrained(tmp_path)
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
    m.save_pretrained(tmp_path)
    assert (tmp_path / "encoder" / "config.json").is_file()
    again = SpeechLM.from_pretrained(tmp_path)
    assert torch.equal(m.encoder.layers[0].fc1.weight, again.encoder.layers[0].fc1.weight)
    assert torch.equal(_logits(m, b), _logits(again, b))


def test_planner_counts_only_the_whisper_encoder():
    from speechlm.config import Config, load
    from speechlm.plan import make_plan

    cfg = load(Config, "tiny", None, ["model.audio_model_id=tiny/whisper", "model.projector_pool_stride=4"])
    plan = make_plan(cfg)
    m = build_model(whisper_config())
    assert plan["params"]["encoder_params"] == sum(p.numel() for p in m.encoder.parameters())
    assert plan["sources"]["encoder_checkpoint_params"] == plan["params"]["encoder_params"]  # decoder keys left out
    assert plan["memory_bytes"]["total"] > 0


def test_bundled_whisper_configs_count_offline(capsys, monkeypatch):
    from speechlm.model.__main__ import main as count_main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for model_id, encoder in (("openai/whisper-tiny.en", 8_208_384), ("openai/whisper-base.en", 20_590_592)):
        count_main(["--count", f"model.audio_model_id={model_id}", "model.text_model_id=tiny/qwen3"])
        rows = {line.split()[0]: line.split()[1:3] for line in capsys.readouterr().out.splitlines()[2:]}
        assert int(rows["encoder"][0].replace(",", "")) == encoder  # the encoder alone, no decoder
        # projector: LayerNorm(d) + Linear(d, 4096) + Linear(4096, 64) (the tiny decoder's width)
        d = {8_208_384: 384, 20_590_592: 512}[encoder]
        assert int(rows["projector"][0].replace(",", "")) == 2 * d + d * 4096 + 4096 + 4096 * 64 + 64
