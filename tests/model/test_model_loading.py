"""Pretrained parts from checkpoints saved in the hub layouts load exactly, or are refused by name.

The checkpoints here are tiny but shaped as users get them: Qwen3.5 as the multimodal
Qwen3_5ForConditionalGeneration (vision tower, an MTP head, the tie flag at the top level or in
the text config), Granite Speech 5 as GraniteSpeech5ForCTC with its own CTC head."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from safetensors.torch import load_file, save_file

from speechlm.config import ConfigError, ModelConfig
from speechlm.model import ids, loading, parts
from speechlm.model.encoders import family_for

TEXT = dict(
    vocab_size=576,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    num_hidden_layers=4,
    linear_num_key_heads=2,
    linear_key_head_dim=16,
    linear_num_value_heads=4,
    linear_value_head_dim=16,
)
VISION = dict(
    depth=1,
    hidden_size=32,
    intermediate_size=64,
    num_heads=2,
    out_hidden_size=64,
    patch_size=4,
    spatial_merge_size=2,
    temporal_patch_size=2,
)


def _save_multimodal(path, tie_at: str):
    """A Qwen3_5ForConditionalGeneration saved as the hub publishes Qwen3.5 (plus two MTP tensors),
    with tie_word_embeddings set only at `tie_at` ("top" or "text") of config.json."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    torch.manual_seed(0)
    model = Qwen3_5ForConditionalGeneration(
        Qwen3_5Config(text_config=TEXT, vision_config=VISION, tie_word_embeddings=True)
    ).eval()
    model.save_pretrained(path)
    sd = load_file(path / "model.safetensors")
    assert "lm_head.weight" not in sd and any(k.startswith("model.visual.") for k in sd)
    sd["mtp.fc.weight"] = torch.randn(64, 128)
    sd["mtp.norm.weight"] = torch.ones(64)
    save_file(sd, path / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((path / "config.json").read_text())
    cfg.pop("tie_word_embeddings", None)
    cfg["text_config"].pop("tie_word_embeddings", None)
    (cfg if tie_at == "top" else cfg["text_config"])["tie_word_embeddings"] = True
    (path / "config.json").write_text(json.dumps(cfg))
    return model


@pytest.fixture(scope="module", params=["top", "text"])
def multimodal(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"qwen3_5_mm_{request.param}")
    return path, _save_multimodal(path, request.param)


def test_multimodal_qwen3_5_loads_with_its_tied_head(multimodal, caplog):
    path, saved = multimodal
    with caplog.at_level(logging.INFO, logger="speechlm.model.loading"):
        dec = parts.load_decoder(str(path), torch.float32, "sdpa")
    assert type(dec).__name__ == "Qwen3_5ForCausalLM"
    assert dec.lm_head.weight.data_ptr() == dec.get_input_embeddings().weight.data_ptr()
    ids = torch.randint(0, TEXT["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(dec.eval()(input_ids=ids).logits, saved(input_ids=ids).logits, rtol=0, atol=1e-5)
    unused = [r.getMessage() for r in caplog.records if "not used" in r.getMessage()]
    assert len(unused) == 1 and "model.visual.*" in unused[0] and "mtp.* (2)" in unused[0]
    assert "language_model" not in unused[0]  # the decoder's own weights are all used


def test_granite_ctc_checkpoint_loads_the_encoder_exactly(tmp_path, caplog):
    from transformers import GraniteSpeech5CTCConfig, GraniteSpeech5EncoderConfig, GraniteSpeech5ForCTC

    torch.manual_seed(0)
    enc = GraniteSpeech5EncoderConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_mel_bins=80,
        max_position_embeddings=64,
        context_size=32,
        conv_kernel_size=5,
        subsample_layers=[0, 1],
    )
    # an untied CTC head, as a trained CTC model may have: stored, and unused by speechlm
    saved = GraniteSpeech5ForCTC(
        GraniteSpeech5CTCConfig(vocab_size=64, encoder_config=enc, tie_word_embeddings=False)
    ).eval()
    saved.save_pretrained(tmp_path)
    with caplog.at_level(logging.INFO, logger="speechlm.model.loading"):
        loaded = parts.load_encoder(family_for(str(tmp_path)), str(tmp_path), torch.float32).eval()
    feats = torch.randn(2, 100, saved.encoder.input_linear.in_features, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(
            loaded(feats).last_hidden_state, saved.encoder(feats).last_hidden_state, rtol=0, atol=1e-5
        )
    unused = [r.getMessage() for r in caplog.records if "not used" in r.getMessage()]
    assert len(unused) == 1 and "ctc_head.* (2)" in unused[0]


@pytest.mark.parametrize("top,text,stored_head", [(True, False, False), (False, True, True)])
def test_disagreeing_tie_flags_follow_the_stored_tensors(tmp_path, top, text, stored_head):
    """Text config and top level disagree: tie exactly when the checkpoint stores no output head."""
    saved = _save_multimodal(tmp_path, "top")
    if stored_head:  # an untied head, as a checkpoint that was saved untied has
        sd = load_file(tmp_path / "model.safetensors")
        sd["lm_head.weight"] = torch.randn_like(sd["model.language_model.embed_tokens.weight"])
        save_file(sd, tmp_path / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["tie_word_embeddings"], cfg["text_config"]["tie_word_embeddings"] = top, text
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    dec = parts.load_decoder(str(tmp_path), torch.float32, "sdpa")
    tied = dec.lm_head.weight.data_ptr() == dec.get_input_embeddings().weight.data_ptr()
    assert tied is not stored_head
    head = load_file(tmp_path / "model.safetensors").get("lm_head.weight", saved.lm_head.weight.detach())
    torch.testing.assert_close(dec.lm_head.weight.detach(), head, rtol=0, atol=0)


def _delete(path, key):
    sd = load_file(path / "model.safetensors")
    del sd[key]
    save_file(sd, path / "model.safetensors", metadata={"format": "pt"})


def test_a_deleted_tensor_is_refused_by_name(tmp_path):
    _save_multimodal(tmp_path, "top")
    _delete(tmp_path, "model.language_model.layers.1.mlp.up_proj.weight")
    for meta in (False, True):  # the real load and the trainer's preflight on the meta device
        with pytest.raises(ConfigError, match=r"decoder .*model\.layers\.1\.mlp\.up_proj\.weight"):
            if meta:
                with loading.meta_only():
                    parts.load_decoder(str(tmp_path), torch.float32, "sdpa")
            else:
                parts.load_decoder(str(tmp_path), torch.float32, "sdpa")


def test_an_untied_checkpoint_without_its_head_is_refused(tmp_path):
    """The hole this module closes: a checkpoint that says untied must ship lm_head."""
    _save_multimodal(tmp_path, "top")
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["tie_word_embeddings"] = False
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="lm_head.weight"):
        parts.load_decoder(str(tmp_path), torch.float32, "sdpa")


def test_trainer_refuses_a_damaged_checkpoint_before_shards(tmp_path, capsys):
    import shutil

    from speechlm.commands import train
    from speechlm.model import tiny

    enc = tmp_path / "enc"
    shutil.copytree(tiny.ensure("granite_speech5"), enc)
    _delete(enc, "encoder.layers.0.conv.pointwise_lin1.weight")
    missing_shards = tmp_path / "never_built"
    with pytest.raises(SystemExit) as e:
        train.main(
            [
                "--config",
                "tiny",
                f"model.audio_model_id={enc}",
                f"data.train=[{{path: {missing_shards}}}]",
                "data.recipe=null",
                f"training.output_dir={tmp_path / 'out'}",
            ]
        )
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "encoder" in err and "layers.0.conv.pointwise_lin1.weight" in err
    assert not missing_shards.exists() and not (tmp_path / "out").exists()


def test_tokenizer_that_outgrows_the_decoder_is_refused():

    tok = loading.load_tokenizer(ids.resolve("tiny/qwen3_5"))
    with torch.device("meta"):
        from transformers import AutoModelForCausalLM, Qwen3Config

        small = AutoModelForCausalLM.from_config(
            Qwen3Config(
                vocab_size=256,
                hidden_size=16,
                intermediate_size=32,
                num_hidden_layers=1,
                num_attention_heads=2,
                num_key_value_heads=1,
                head_dim=8,
            )
        )
    with pytest.raises(ConfigError, match="tokenizer of 'x'.*256 rows"):
        loading.check_tokenizer(tok, small, "x")
    with pytest.raises(ConfigError, match="tokenizer of '/nonexistent'"):
        loading.load_tokenizer("/nonexistent")


def test_preflight_passes_the_tiny_twins():
    mcfg = ModelConfig(audio_model_id="tiny/granite_speech5", text_model_id="tiny/qwen3_5")
    parts.preflight(mcfg, family_for(mcfg.audio_model_id))
