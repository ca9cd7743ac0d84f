import json

import pytest
import torch

from speechlm import config, pretrain_encoder
from speechlm.model import build_model


def test_words_and_ctc_collapse():
    assert pretrain_encoder.words("Did Anna see the red cat, in Berlin?") == ["did", "anna", "see", "the", "red", "cat", "in", "berlin"]
    c = pretrain_encoder.CTCCollator(["a", "b"])
    # blanks (0) separate, repeats collapse, ids past the vocabulary are unknown words
    assert c.decode([0, 1, 1, 0, 1, 2, 2, 0, 3]) == "a a b <unk>"


def test_ctc_pretraining_learns_and_feeds_the_speech_llm(synthetic_shards, tmp_path):
    out = tmp_path / "enc"
    torch.manual_seed(0)
    res = pretrain_encoder.pretrain(synthetic_shards, out, steps=40, batch_size=8, lr=3e-3, warmup=5)
    first, last = sum(res["losses"][:5]) / 5, sum(res["losses"][-5:]) / 5
    assert last < 0.8 * first, res["losses"]
    vocab = json.loads((out / "ctc_vocab.json").read_text())
    assert vocab[0] == "<blank>" and vocab[-1] == "<unk>" and "the" in vocab
    # the folder is a plain HF encoder that the speech-LLM builds from, frozen
    cfg = config.load(config.Config, "demo", overrides=[f"model.audio_model_id={out}"])
    model = build_model(cfg)
    assert not any(p.requires_grad for p in model.encoder.parameters())
    # a finished pretraining is reused, not redone
    again = pretrain_encoder.pretrain(synthetic_shards, out, steps=40)
    assert again == res


def test_cli_errors_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        pretrain_encoder.main(["--shards", str(tmp_path), "--out", str(tmp_path / "x")])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip() == f"error: --shards {tmp_path}: no manifest.json (build it with python -m speechlm.shard)"
