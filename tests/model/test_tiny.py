"""The tiny twin builds offline, deterministically, as plain HF dirs that load via from_pretrained."""

import hashlib

import pytest
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GraniteSpeech5Encoder

from speechlm.cache import cache_root
from speechlm.model import ids, tiny


def _digest(d):
    return hashlib.sha256((d / "model.safetensors").read_bytes()).hexdigest()


def test_resolve_and_load():
    for name in tiny.NAMES:
        path = ids.resolve(f"tiny/{name}")
        assert (cache_root() / "tiny").as_posix() in path
    assert ids.resolve("Qwen/Qwen3.5-2B") == "Qwen/Qwen3.5-2B"
    dec = AutoModelForCausalLM.from_pretrained(ids.resolve("tiny/qwen3_5"))
    assert type(dec).__name__ == "Qwen3_5ForCausalLM"
    assert set(dec.config.layer_types) == {"linear_attention", "full_attention"}
    assert type(AutoModelForCausalLM.from_pretrained(ids.resolve("tiny/qwen3"))).__name__ == "Qwen3ForCausalLM"
    # the encoder dir is a CTC checkpoint like the hub's; the bare encoder loads from it with its weights
    enc_dir = ids.resolve("tiny/granite_speech5")
    assert AutoConfig.from_pretrained(enc_dir).model_type == "granite_speech5_ctc"
    enc = GraniteSpeech5Encoder.from_pretrained(enc_dir)
    assert enc.layers[0].conv.norm.running_mean.abs().sum() > 0  # loaded, not re-initialized
    tok = AutoTokenizer.from_pretrained(ids.resolve("tiny/qwen3"))
    assert tok.convert_tokens_to_ids("<audio>") < dec.config.vocab_size
    assert tok.decode(tok("zebra quiz 42")["input_ids"]) == "zebra quiz 42"  # byte-level: any text


def test_deterministic_rebuild(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEECHLM_CACHE", str(tmp_path))
    a = tiny.ensure("qwen3")
    first = _digest(a)
    import shutil

    shutil.rmtree(a)
    assert _digest(tiny.ensure("qwen3")) == first
    assert (tmp_path / "tiny").is_dir()


def test_unknown_name():
    with pytest.raises(ValueError, match="unknown tiny model 'gpt2'"):
        tiny.ensure("gpt2")
