"""The listening corpus, non-speech clips with empty answers, the CTC warm start and scores by part
(issue 20). The trainer tests run the tiny twin with production's precision, freeze flags and ZeRO-2
(the `tiny` recipe) on a small build of the demo's own corpus recipe. Inference that stops is
tests/model/test_generation.py; the CTC loss alone, tests/model/test_ctc.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from speechlm import config as config_mod
from speechlm import text
from speechlm.config import Config, ConfigError
from speechlm.demo import builtin, corpus, grammar, listening, nonspeech
from speechlm.scoring import by_part
from speechlm.shard import load_recipe

SIZES = {
    "speech": {"train": 40, "eval": 12, "test": 12, "unseen_test": 4, "random_test": 4},
    "nonspeech": {"train": 12, "eval": 6, "test": 6},
}


def demo_recipe(**speech):
    """shards/demo.yaml, scaled down (same corpus kinds, vocabulary, voices and seed)."""
    recipe, _ = load_recipe("demo")
    for src in recipe.sources:
        for k, v in {**SIZES[src.name], **(speech if src.name == "speech" else {})}.items():
            setattr(src.settings, k, v)
    recipe.output.shard_clips = 16
    recipe.output.work_chunk = 16
    return recipe


# ---------------------------------------------------------------- the corpus
def test_corpus_is_a_function_of_the_seed_and_test_text_never_trains():
    cfg = load_recipe("demo")[0].sources[0].settings
    a = {s: corpus.rows(cfg, s) for s in ("train", "eval", "test")}
    assert a == {s: corpus.rows(cfg, s) for s in ("train", "eval", "test")}  # deterministic, voices included
    cfg.seed = 1
    assert corpus.rows(cfg, "train") != a["train"]
    train = {t for _, t, _ in a["train"]}
    held = [t for s in ("eval", "test") for _, t, _ in a[s]]
    assert len(train) == cfg.train and not train & set(held) and len(set(held)) == len(held)
    parts = {i.rsplit("-", 1)[0]: 0 for i, _, _ in a["test"]}
    for i, _, _ in a["test"]:
        parts[i.rsplit("-", 1)[0]] += 1
    assert parts == {"test-seen": 40, "test-unseen": 40, "test-random": 40}
    words = corpus.vocabulary(cfg.vocabulary, 0)
    assert len(words) == len(set(words)) == 52 + cfg.vocabulary
    assert all(len(set(g) & set(words)) <= 1 for g in corpus.HOMOPHONE_GROUPS)
    big = corpus.vocabulary(900, 0)  # nearly the whole list: the grammar's "see" keeps "sea" out
    assert "see" in big and "sea" not in big and all(len(set(g) & set(big)) <= 1 for g in corpus.HOMOPHONE_GROUPS)
    for i, t, _ in a["test"]:
        tokens = {w.strip(",.?").lower() for w in t.split()}
        if "random" in i:
            assert tokens <= {w.lower() for w in words}
        elif "unseen" in i:
            assert grammar.has_unseen_word(t)
        else:  # a sentence shape the training grammar never makes, over training words only
            assert not grammar.has_unseen_word(t) and tokens <= {w.lower() for w in grammar.VOCABULARY}
    shapes = {t for _, t, _ in a["train"] if t[-1] in ".?"}
    assert not {t for i, t, _ in a["test"] if "seen" in i} & shapes
    assert sum(t[-1] not in ".?" for t in train) == round(cfg.train * cfg.random_share)


def test_corpus_settings_are_checked_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"synthetic.vocabulary"):
        corpus.vocabulary(5000, 0)
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources: [{name: n, kind: synthetic, synthetic: {corpus: nonspeech}}]\n")
    with pytest.raises(ConfigError, match=r"sources\[0\].keep_empty"):
        load_recipe(str(bad))


def test_speech_clips_open_and_close_with_seeded_silence(tmp_path):
    cfg = load_recipe("demo")[0].sources[0].settings
    assert cfg.silence_seconds == 0.3
    padded = builtin.rows(cfg, "test")
    cfg.silence_seconds = 0.0
    plain = builtin.rows(cfg, "test")
    # the same texts, voices and ids as without silence; only the spec is wrapped
    assert [(o, t, s[3]) for o, t, s in padded] == plain
    before = [s[1] for _, _, s in padded]
    assert all(0 <= b <= 0.3 for b in before) and max(before) > 0.25 and min(before) < 0.05
    (_, _, spec), (_, _, inner) = padded[0], plain[0]
    wave, speech = builtin.synthesize(spec), builtin.synthesize(inner)
    head, tail = int(spec[1] * 16000), int(spec[2] * 16000)
    assert len(wave) == head + len(speech) + tail and np.array_equal(wave[head : head + len(speech)], speech)
    assert not wave[:head].any() and not wave[len(wave) - tail :].any()
    for body, key in [
        ("{corpus: listen, silence_seconds: -1}", "silence_seconds"),
        ("{corpus: nonspeech, silence_seconds: 0.2}", "silence_seconds"),
    ]:
        bad = tmp_path / "bad.yaml"
        bad.write_text(f"sources: [{{name: n, kind: synthetic, keep_empty: true, synthetic: {body}}}]\n")
        with pytest.raises(ConfigError, match=rf"sources\[0\].synthetic.{key}"):
            load_recipe(str(bad))


def test_nonspeech_clips_are_deterministic_and_at_their_level():
    cfg = load_recipe("demo")[0].sources[1].settings
    rows = nonspeech.rows(cfg, "test")
    assert all(t == "" for _, t, _ in rows) and {s[1] for _, _, s in rows} == set(nonspeech.KINDS)
    for _, _, spec in rows[: len(nonspeech.KINDS)]:
        x = nonspeech.synthesize(spec)
        assert x.dtype == np.float32 and len(x) == int(spec[2] * 16000)
        assert np.array_equal(x, nonspeech.synthesize(spec))
        rms = float(np.sqrt(np.mean(x.astype(np.float64) ** 2)))
        if spec[1] == "silence":
            assert rms <= 10 ** (-60 / 20) * 1.01
        elif spec[1] == "clicks":  # sparse: a loud level would clip, so they peak at 0.99 instead
            assert 20 * np.log10(rms) <= spec[3] + 0.5 and np.abs(x).max() <= 0.99 + 1e-6
        else:
            assert 20 * np.log10(rms) == pytest.approx(spec[3], abs=0.5)


# ---------------------------------------------------------------- the trainer
@pytest.fixture(scope="module")
def listen_shards(tmp_path_factory):
    from speechlm.shard import build

    return build(demo_recipe(), tmp_path_factory.mktemp("shards") / "demo", workers=2)


@pytest.fixture(scope="module")
def warm_run(tmp_path_factory, listen_shards):
    """The tiny twin (bf16, frozen bf16 encoder and decoder, ZeRO-2): 3 CTC steps, then 3 LM steps;
    evaluations and checkpoints at 3 and 6."""
    from speechlm.train.loop import Trainer

    tmp = tmp_path_factory.mktemp("runs")
    cfg = config_mod.load(
        Config,
        "tiny",
        None,
        [
            f"training.output_dir={tmp}",
            "training.run_name=warm",
            f"data.train=[{{path: {listen_shards}, split: train}}]",
            f"data.eval=[{{path: {listen_shards}, split: eval}}]",
            "training.max_steps=6",
            "training.ctc_warmup_steps=3",
            "training.warmup_steps=1",
            "training.eval_steps=3",
            "training.save_steps=3",
            "training.logging_steps=1",
            "training.save_total_limit=null",
            "training.eval_transcribe_clips=18",
            "model.max_new_tokens=6",
            "data.num_workers=1",
        ],
    )
    trainer = Trainer(cfg)
    assert trainer.run() == 0
    return trainer


def _lora(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().float().clone() for n, p in model.named_parameters() if "lora_B" in n}


def test_ctc_warm_start_trains_the_projector_alone_then_the_lm_loss_takes_over(warm_run):
    from transformers import set_seed

    from speechlm.model import build_model, from_pretrained

    t = warm_run
    assert t.cfg.deepspeed.zero_stage == 2 and t.cfg.training.bf16 and t.cfg.model.model_dtype == "bfloat16"
    rows = [json.loads(line) for line in (t.run_dir / "metrics.jsonl").read_text().splitlines()]
    loss = {r["step"]: r["train/loss"] for r in rows if "train/loss" in r}
    assert sorted(loss) == [1, 2, 3, 4, 5, 6] and all(np.isfinite(list(loss.values())))
    set_seed(t.cfg.training.seed)
    fresh = build_model(t.cfg)
    at3 = from_pretrained(t.run_dir / "checkpoints" / "step-3" / "model")
    at6 = from_pretrained(t.run_dir / "checkpoints" / "step-6" / "model")
    # CTC steps: the projector moved, the adapters (B starts at zero) did not; then the LM loss moves them
    pairs = zip(fresh.projector.parameters(), at3.projector.parameters())
    assert any(not torch.equal(a.float(), b.float()) for a, b in pairs)
    assert all(torch.count_nonzero(v) == 0 for v in _lora(at3).values())
    assert any(torch.count_nonzero(v) > 0 for v in _lora(at6).values())
    evals = [r for r in rows if "eval/wer/random" in r]
    # WER per part at every evaluation after the warm start (at step 3 only the eval loss)
    assert [r["step"] for r in evals] == [6] and [r["step"] for r in rows if "eval/loss" in r] == [3, 6]
    assert {
        "eval/wer/seen",
        "eval/wer/unseen",
        "eval/empty_share/nonspeech",
        "eval/capped",
        "eval/loops_truncated",
    } <= set(evals[0])
    # the clips each figure was measured on (the model card states them beside the figure)
    assert all(evals[0][f"eval/clips/{p}"] >= 1 for p in ("seen", "unseen", "nonspeech"))


def test_nonspeech_clips_reach_the_trainer_with_empty_answers_and_count_in_the_loss(warm_run):
    from speechlm.train.inputs import make_loaders

    model = warm_run.model
    eot = text.end_of_turn_id(model.tokenizer)
    train, _ = make_loaders(warm_run.cfg, model, 0, 1)
    trained = {
        i for line in (warm_run.run_dir / "clips.rank0.jsonl").read_text().splitlines() for i in json.loads(line)["ids"]
    }
    assert any(i.startswith("nonspeech_") for i in trained)  # the run trained on them
    for batch in train:
        rows = [k for k, i in enumerate(batch["ids"]) if i.startswith("nonspeech_") and batch["weight"][k] > 0]
        if rows:
            break
    else:
        pytest.fail("no non-speech clip in an epoch of the training reader")
    k = rows[0]
    assert batch["labels"][k][batch["labels"][k] != -100].tolist() == [eot]  # the answer is just end-of-turn
    model.eval()
    with torch.no_grad():
        full = model(**batch)
        w = batch["weight"].clone()
        w[k] = 0
        without = model(**{**batch, "weight": w})
    assert float(full.num_tokens) - float(without.num_tokens) == pytest.approx(1.0)  # its one label token counts
    assert float(full.loss) != float(without.loss)


def test_scores_by_part():
    rows = [
        {"id": "speech_test-random-00001", "reference": "fish tree", "hypothesis": "fish three"},
        {"id": "speech_test-seen-00002", "reference": "Is the dog in Rome?", "hypothesis": "is the dog in rome"},
        {"id": "nonspeech_test-nonspeech-00003", "reference": "", "hypothesis": "", "loop": True},
        {"id": "nonspeech_test-nonspeech-00004", "reference": "", "hypothesis": "you"},
    ]
    parts = by_part.score(rows)
    assert parts["random"]["wer"] == 0.5 and parts["seen"]["wer"] == 0.0
    assert parts["nonspeech"]["empty_share"] == 0.5 and parts["nonspeech"]["loops"] == 1
    assert by_part.metrics(parts) == {"eval/wer/random": 0.5, "eval/wer/seen": 0.0, "eval/empty_share/nonspeech": 0.5}
    assert len(listening.summary_lines(parts)) == 3
