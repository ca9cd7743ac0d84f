"""SpeechLM on the tiny twin: placeholders, freezing, dtypes, eval-mode encoder, calibration, loss."""

import pytest
import torch
import torch.nn.functional as F

from model_helpers import batch, snapshot, tiny_config, train_steps, waves
from speechlm.config import ConfigError
from speechlm.model import build_model, calibrate


@pytest.fixture(scope="module")
def model():
    return build_model(tiny_config())


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_placeholder_count_equals_projector_output(stride):
    m = build_model(tiny_config(stride=stride))
    lengths = [1600, 1759, 3200, 4001, 7777, 16000, 16160, 23999]
    feats, mask = m.features(waves(lengths))
    proj, emitted = m.encode_audio(feats, mask)
    expected = [m.family.audio_token_count(n, stride) for n in lengths]
    assert emitted.tolist() == expected == m.audio_lengths(mask).tolist()
    assert proj.shape[1] >= max(expected)
    # a wrong number of placeholders is a clear error, never a silent misalignment
    b = batch(m, waves([16000, 9000]))
    b["input_ids"][0, (b["input_ids"][0] == m.audio_token_id).nonzero()[0]] = 5
    with pytest.raises(ValueError, match="exactly as many <audio> tokens"):
        m(**b)


def test_dtypes_and_trainable_parts(model):
    assert {p.dtype for p in model.encoder.parameters()} == {torch.bfloat16}
    assert {b.dtype for n, b in model.encoder.named_buffers() if "running" in n} == {torch.bfloat16}
    assert {p.dtype for p in model.projector.parameters()} == {torch.float32}
    lora = {n: p for n, p in model.named_parameters() if "lora_" in n}
    base = {n: p for n, p in model.decoder.named_parameters() if "lora_" not in n}
    assert lora and {p.dtype for p in lora.values()} == {torch.float32} and all(p.requires_grad for p in lora.values())
    assert {p.dtype for p in base.values()} == {torch.bfloat16} and not any(p.requires_grad for p in base.values())
    assert not any(p.requires_grad for p in model.encoder.parameters())
    groups = model.parameter_groups(tiny_config().training)
    names = {g["name"]: g for g in groups}
    assert set(names) == {"projector", "projector_no_decay", "decoder"}
    assert names["projector"]["weight_decay"] == 0.01 and names["projector_no_decay"]["weight_decay"] == 0.0
    assert names["decoder"]["lr"] == 1e-4 and names["projector"]["lr"] == 1e-3
    assert sum(len(g["params"]) for g in groups) == sum(p.requires_grad for p in model.parameters())


def test_encoder_stays_in_eval_mode(model):
    model.train()
    assert model.training and model.projector.training and not model.encoder.training
    assert not any(m.training for m in model.encoder.modules())
    stats = {n: b.clone() for n, b in model.encoder.named_buffers()}
    model(**batch(model, waves()))
    assert all(torch.equal(stats[n], b) for n, b in model.encoder.named_buffers())


def test_frozen_parts_bit_identical_trainable_change():
    cfg = tiny_config()
    m = build_model(cfg)
    before = snapshot(m)
    train_steps(m, cfg.training, batch(m, waves()))
    for n, p in m.named_parameters():
        if p.requires_grad:
            assert not torch.equal(before[n], p), f"{n} did not change"
        else:
            assert p.grad is None and torch.equal(before[n], p), f"frozen {n} changed"
    assert any(n.startswith("projector") for n, p in m.named_parameters() if p.requires_grad)


def test_calibration_matches_text_embedding_rms(model):
    from speechlm.model.build import rms, synthetic_waves

    m = build_model(tiny_config(calibrate=True))
    assert m.calibration["source"] == "synthetic tones+noise"
    held_out = synthetic_waves(n=3, seconds=1.5, seed=7)  # not the calibration audio
    feats, mask = m.features(held_out)
    with torch.no_grad():
        proj, lengths = m.encode_audio(feats, mask)
    valid = torch.arange(proj.shape[1])[None] < lengths[:, None]
    text_rms = rms(m._base_lm().get_input_embeddings().weight[: len(m.tokenizer)])
    assert abs(rms(proj[valid]) / text_rms - 1) < 0.10
    # on a real batch of audio when one is given
    info = calibrate(m, waves([16000, 12000], seed=3))
    assert info["source"] == "audio batch" and abs(info["factor"] - 1) < 0.5


def test_label_position_loss_equals_full_logits_loss(model):
    model.eval()
    b = batch(model, waves(), weight=[1.0, 1.0])
    with torch.no_grad():
        ours = model(**b)
        with model._autocast(torch.device("cpu")):
            embeds = model.embed(b["input_ids"], b["input_features"], b["feature_mask"])
            full = model.decoder(inputs_embeds=embeds, attention_mask=b["attention_mask"]).logits
        ref = F.cross_entropy(full[:, :-1].float().flatten(0, 1), b["labels"][:, 1:].flatten(), ignore_index=-100)
    torch.testing.assert_close(ours.loss, ref, rtol=1e-3, atol=1e-3)
    assert ours.num_tokens == (b["labels"] != -100).sum()


def test_weight_scales_clips(model):
    model.eval()
    clips = waves()
    with torch.no_grad():
        both = model(**batch(model, clips, weight=[1.0, 0.0]))
        first = model(**batch(model, clips[:1], transcripts=("hello world",)))
        zero = model(**batch(model, clips, weight=[0.0, 0.0]))
    torch.testing.assert_close(both.loss, first.loss, rtol=2e-2, atol=2e-2)  # bf16, different padding
    assert both.num_tokens == first.num_tokens and zero.loss == 0 and zero.num_tokens == 0


def test_gradient_checkpointing_adapters_still_train():
    cfg = tiny_config(gradient_checkpointing=True)
    m = build_model(cfg)
    assert m._base_lm().is_activation_checkpointing
    before = snapshot(m)
    train_steps(m, cfg.training, batch(m, waves()))
    lora_b = [n for n in before if "lora_B" in n]
    assert lora_b and all(not torch.equal(before[n], dict(m.named_parameters())[n]) for n in lora_b)


def test_freeze_flag_combinations():
    with pytest.raises(ConfigError, match="nothing left to train"):
        build_model(tiny_config(freeze_projector=True, use_lora=False))
    with pytest.raises(ConfigError, match="freeze_language_model=false with LoRA"):
        build_model(tiny_config(freeze_language_model=False))
    # projector only
    m = build_model(tiny_config(use_lora=False))
    assert {n.split(".")[0] for n, p in m.named_parameters() if p.requires_grad} == {"projector"}
    # full decoder without its embeddings; the encoder unfrozen too
    cfg = tiny_config(use_lora=False, freeze_language_model=False, freeze_audio_encoder=False, freeze_projector=True)
    m = build_model(cfg)
    emb = m._base_lm().get_input_embeddings().weight
    before = snapshot(m)
    train_steps(m, cfg.training, batch(m, waves()))
    after = dict(m.named_parameters())
    assert not emb.requires_grad and torch.equal(before["decoder.model.embed_tokens.weight"], emb)
    assert not torch.equal(
        before["decoder.model.layers.0.mlp.up_proj.weight"], after["decoder.model.layers.0.mlp.up_proj.weight"]
    )
    assert not torch.equal(before["encoder.input_linear.weight"], after["encoder.input_linear.weight"])
    assert torch.equal(before["projector.linear1.weight"], after["projector.linear1.weight"])
    assert {g["name"] for g in m.parameter_groups(cfg.training)} >= {"encoder", "decoder"}
    assert not m.encoder.training  # unfrozen, still eval mode (BatchNorm statistics fixed)


def test_training_steps_add_the_ctc_head_loss_and_eval_does_not():
    """training.ctc_weight: a training step's loss is the LM loss plus w x the CTC head's loss on the same
    projected frames; evaluation (and inference) reports the LM loss alone."""
    from speechlm.model.ctc import projected_ctc_loss

    m = build_model(tiny_config(ctc_weight=0.5))
    b = batch(m, waves())
    with torch.no_grad():
        with m._autocast(torch.device("cpu")):  # the projection in bf16 as in the step, the head in fp32
            projected = m.encode_audio(b["input_features"], b["feature_mask"])
        ctc = projected_ctc_loss(m, *projected, b["labels"])[0]
    with torch.no_grad():
        m.eval()
        eval_loss = m(**b).loss
        m.train()
        torch.manual_seed(0)  # LoRA dropout: the same draws for both training forwards
        both = m(**b).loss
        m.ctc_weight = 0.0
        torch.manual_seed(0)
        lm = m(**b).loss
    assert ctc > 0 and both == pytest.approx((lm + 0.5 * ctc).item(), rel=1e-5)
    m.eval()
    m.ctc_weight = 0.5
    with torch.no_grad():
        assert m(**b).loss == eval_loss  # evaluation: the LM loss alone
