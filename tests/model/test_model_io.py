"""Export / reload: identical logits, a standard peft adapter, bundled real configs for --count."""

import torch
from transformers import AutoModelForCausalLM

from model_helpers import batch, tiny_config, train_steps, waves
from speechlm.commands.model import main as count_main
from speechlm.model import build_model, from_pretrained, ids, save_pretrained


def _logits(m, b):
    m.eval()
    with torch.no_grad():
        return m.label_logits(b["input_features"], b["feature_mask"], b["input_ids"], b["attention_mask"], b["labels"])[
            0
        ]


def test_save_load_identical_logits_and_peft_adapter(tmp_path):
    cfg = tiny_config(calibrate=True)
    m = build_model(cfg)
    b = batch(m, waves())
    train_steps(m, cfg.training, b, steps=3)  # LoRA B starts at zero: train so the adapter matters
    save_pretrained(m, tmp_path)
    assert not list(tmp_path.rglob("*.bin")) and not list(tmp_path.rglob("*.pt"))  # safetensors only
    again = from_pretrained(tmp_path)
    assert torch.equal(_logits(m, b), _logits(again, b))
    assert again.calibration == m.calibration and not any(p.requires_grad for p in again.parameters())

    # the adapter is a plain peft adapter for the base decoder
    from peft import PeftModel

    base = AutoModelForCausalLM.from_pretrained(ids.resolve("tiny/qwen3_5"), dtype=torch.bfloat16)
    peft_model = PeftModel.from_pretrained(base, tmp_path / "adapter")
    ours = {n.replace(".default", ""): p for n, p in m.decoder.named_parameters() if "lora_" in n}
    theirs = {n.replace(".default", ""): p for n, p in peft_model.named_parameters() if "lora_" in n}
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert any(ours[k].abs().sum() > 0 for k in ours if "lora_B" in k)


def test_save_load_trained_embeddings_and_full_decoder(tmp_path):
    cfg = tiny_config(decoder="tiny/qwen3", freeze_text_embed_tokens=False)  # LoRA + embeddings
    m = build_model(cfg)
    b = batch(m, waves())
    train_steps(m, cfg.training, b)
    save_pretrained(m, tmp_path / "emb")
    from safetensors import safe_open

    with safe_open(tmp_path / "emb" / "model.safetensors", "pt") as f:  # the trained table, not the decoder
        assert "embed_tokens.weight" in f.keys()
    assert not (tmp_path / "emb" / "decoder").exists()
    assert torch.equal(_logits(m, b), _logits(from_pretrained(tmp_path / "emb"), b))

    cfg = tiny_config(decoder="tiny/qwen3", use_lora=False, freeze_language_model=False)
    m = build_model(cfg)
    train_steps(m, cfg.training, b)
    save_pretrained(m, tmp_path / "full")
    assert (tmp_path / "full" / "decoder" / "config.json").is_file() and not (tmp_path / "full" / "adapter").exists()
    assert torch.equal(_logits(m, b), _logits(from_pretrained(tmp_path / "full"), b))


def test_transcribe_returns_text(tmp_path):
    m = build_model(tiny_config(decoder="tiny/qwen3"))
    out = m.transcribe(waves([16000, 6000]), max_new_tokens=4)
    assert len(out) == 2 and all(isinstance(s, str) for s in out)
    assert not m.training


def test_real_default_parameter_table_from_bundled_configs(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    count_main(["--count"])
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:3] for line in out.splitlines()[2:]}
    n = lambda s: int(s.replace(",", ""))  # noqa: E731
    # projector: LayerNorm(1024) + Linear(1024, 4096) + Linear(4096, 2048) (its CTC blank is a buffer)
    proj = 2 * 1024 + 1024 * 4096 + 4096 + 4096 * 2048 + 2048
    assert n(rows["projector"][0]) == proj == n(rows["projector"][1])
    assert abs(n(rows["encoder"][0]) / 1e6 - 472.9) < 0.1 and n(rows["encoder"][1]) == 0
    assert abs(n(rows["decoder"][0]) / 1e6 - 1881.8) < 0.1 and n(rows["decoder"][1]) == 0
    # LoRA r=64 on every linear layer of the decoder but the LM head: r * (in + out) each
    from speechlm.model.parts import meta_decoder

    dec = meta_decoder("Qwen/Qwen3.5-2B")
    lora = sum(
        64 * (mod.in_features + mod.out_features)
        for name, mod in dec.named_modules()
        if isinstance(mod, torch.nn.Linear) and name != "lm_head"
    )
    assert n(rows["lora"][0]) == lora == n(rows["lora"][1])


def test_llama3_template_decoder_trains_exports_and_transcribes(tmp_path):
    """A Llama-family decoder (Llama 3 template: <|eot_id|> ends a turn, EOS is another token)."""
    from speechlm import text

    cfg = tiny_config(decoder="tiny/llama3")
    m = build_model(cfg)
    assert type(m._base_lm()).__name__ == "LlamaForCausalLM"
    b = batch(m, waves())
    eot = m.tokenizer.convert_tokens_to_ids("<|eot_id|>")
    assert text.end_of_turn_id(m.tokenizer) == eot and eot != m.tokenizer.eos_token_id
    assert (b["labels"] == eot).sum(1).tolist() == [1, 1]  # each target closes with the template's token
    train_steps(m, cfg.training, b, steps=3)
    save_pretrained(m, tmp_path)
    again = from_pretrained(tmp_path)
    assert torch.equal(_logits(m, b), _logits(again, b))
    out = again.transcribe(waves([16000, 6000]), max_new_tokens=4)
    assert len(out) == 2 and all(isinstance(s, str) for s in out)
