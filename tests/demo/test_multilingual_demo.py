"""The multilingual demo end to end on the real weights (`speechlm demo --languages en,es,de,fr,ja`, what
`make demo-multilingual` runs), on a smaller corpus and fewer steps than the full demo so that CI can run
it (docs/benchmarks.md, "The multilingual demo"): real Whisper base (frozen) + SmolLM2-135M (LoRA) trained
to transcribe and translate with detect-or-pin answers, then the demo's report.

It asserts that the model learned, not the issue's goals (the full demo does not meet them on 2 cores:
docs/benchmarks.md). The reference is the same run's checkpoint at the end of the CTC warm start, whose
decoder and LoRA are untouched (an untrained answerer on a trained projector), scored by the same report:
the eval loss falls; with its language pinned, every language is transcribed with fewer errors than by
that reference; the language is told more often than by the reference and than chance (1 in 5) with
none given; translation scores above the reference; non-speech is answered with nothing; at most
MAX_PINNED_ELSEWHERE pinned answers come back in another language.

Pinning is asserted since a translation's opening names its target (`language German to English: ...`):
the measured runs answered 6 (stride 4) and 8 (stride 3) of 100 pinned clips in another language; with
the old opening it was 38 of 100. The reference's own count is no bound: whether its noise reads as a
language decides it (48 at stride 4, 5 at stride 3). The full demo (800 CTC + 300 LM steps) gives 2 of
300 (docs/benchmarks.md, run 14).
The fast test at the end runs the same command on the tiny twins for a few steps (its stages and report).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from paths import REPO

LANGUAGES = ("en", "es", "de", "fr", "ja")
# the small corpus per language: training clips, and test clips per held-out part (the rest is `seen`)
TRAIN_CLIPS, TEST_CLIPS, PART_CLIPS = 300, 20, 5
# steps: the CTC warm start, then the LM phase (the full demo: 800 + 200)
CTC_STEPS, LM_STEPS = 100, 160
# the measured run of these settings (2026-12-05, the 2-core machine otherwise quiet; 519 s for the test,
# the demo 424 s): eval loss 5.98 -> 1.96 (0.33x); mean pinned error per language 55-113% against the
# reference's 146-288%; LID 37% (reference 0%); chrF 28.0 (8.0) over the four languages; non-speech 100%
# empty (0%); 6 of 100 pinned answers in another language (48). At the recipe's stride 3 (2026-12-05, a host
# 1.5-1.85x slower) 120 LM steps left Spanish's error at 107% against the reference's 109% (828 s); 160 LM
# steps (1,007 s for the test, the demo 843 s): mean pinned error en 47, es 93, de 80, fr 71, ja 90%
# (reference 172, 109, 121, 150, 170%), LID 64% (0%), chrF 36.5 (8.2), non-speech 100% empty, 100% when
# pinned (0%), 1 of 100 pinned answers in another language (5). With the CTC head on the transcript alone
# and language_dropout 0.8 (2026-12-06, the slow host: 1,078 s, the demo 914 s): eval loss falls; mean
# pinned error en 29, es 90, de 70, fr 58, ja 101% (reference 119, 156, 185, 186, 121%), LID 61% (0%), chrF
# 29.4 (6.9), non-speech 100% empty, 80% when pinned (0%), 8 of 100 pinned answers in another language (24)
# With the CTC head's _ChunkedLSE and the encoder cache (2026-12-06, the slow host: 1,023 s, the demo 846 s,
# train 718 s): mean pinned error en 32, es 100, de 63, fr 58, ja 93% (reference unchanged), LID 56% (0%),
# chrF 38.4 (6.9), non-speech 100% empty, 80% when pinned, 4 of 100 pinned answers in another language (24)
MAX_EVAL_LOSS_SHARE = 0.7
MIN_EMPTY_SHARE = 0.5
MAX_PINNED_ELSEWHERE = 20  # of the 100 pinned clips (5 languages x 20 test clips)


def _small_recipe(tmp: Path) -> Path:
    """shards/multilingual_demo.yaml scaled down: every language, every held-out part, and non-speech."""
    recipe = yaml.safe_load((REPO / "shards" / "multilingual_demo.yaml").read_text())
    for source in recipe["sources"]:
        if source["kind"] == "multilingual":
            translate = 0 if source["multilingual"]["language"] == "en" else PART_CLIPS
            source["multilingual"].update(
                train=TRAIN_CLIPS,
                eval=10,
                test=TEST_CLIPS,
                unseen_test=PART_CLIPS,
                random_test=PART_CLIPS,
                translate_test=translate,
            )
        else:
            source["synthetic"].update(train=100, eval=4, test=10)
    path = tmp / "multilingual_small.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def _mean_error(fig: dict, lang: str) -> float:
    metric = "cer" if lang == "ja" else "wer"
    v = fig["languages"][lang]
    return sum(v[p][metric] for p in ("seen", "unseen", "random")) / 3


def _reference(run: Path, shards: str) -> dict:
    """The report's figures for the checkpoint at the end of the CTC warm start (LM phase untrained)."""
    import torch

    from speechlm import inference
    from speechlm.demo import multilingual_report

    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)  # every core, as the demo's own report stage has them
    try:
        model = inference.load_model(str(run / "checkpoints" / f"step-{CTC_STEPS}"))
        return multilingual_report.figures(multilingual_report.passes(model, Path(shards), "test"))
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_multilingual_demo_learns(tmp_path):
    # every core, as `make demo-multilingual` gets them (conftest pins the test process to one thread)
    env = {**os.environ, "OMP_NUM_THREADS": str(os.cpu_count() or 1)}
    out = tmp_path / "outputs"
    steps = [
        f"training.max_steps={CTC_STEPS + LM_STEPS}",
        f"training.ctc_warmup_steps={CTC_STEPS}",
        f"training.eval_steps={CTC_STEPS}",  # the first evaluation ends the warm start: the loss's reference
        f"training.save_steps={CTC_STEPS}",
    ]
    cmd = [sys.executable, "-m", "speechlm.demo", "--languages", ",".join(LANGUAGES)]
    cmd += ["--shards", str(_small_recipe(tmp_path)), "--out", str(out), "--name", "ml", *steps]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    # the demo's own summary in the log (make test-all shows it with -rP)
    print("\n".join(r.stdout.splitlines()[-16:]))
    report = json.loads((out / "ml" / "multilingual_report.json").read_text())
    ref = _reference(out / "ml", report["shards"])
    print("reference (end of the CTC warm start):\n" + "\n".join(_summary(ref)))

    (out / "ml" / "reference_report.json").write_text(json.dumps(ref, indent=1))
    assert_learned(report, ref)


def assert_learned(report: dict, ref: dict) -> None:
    """The checks of the module docstring, on the demo's report and the reference's figures."""
    fig, eval_loss = report["figures"], report["eval_loss"]
    # the eval loss falls: the first evaluation ends the CTC warm start (the decoder and LoRA untouched)
    assert len(eval_loss) >= 2 and eval_loss[-1] < MAX_EVAL_LOSS_SHARE * eval_loss[0], eval_loss

    # every language transcribed with its language pinned, with fewer errors than the untrained answerer
    assert set(fig["languages"]) == set(LANGUAGES)
    for lang in LANGUAGES:
        assert _mean_error(fig, lang) < _mean_error(ref, lang), (lang, fig["languages"][lang], ref["languages"][lang])

    # the language told with none given: above chance and above the untrained answerer
    # (no answer opening with a language of the list gives no "lid" key: the reference's case)
    assert fig["lid"].get("lid", 0.0) > max(0.2, ref["lid"].get("lid", 0.0)), (fig["lid"], ref["lid"])
    # translation into English learned: chrF above the untrained answerer's, over the four languages
    assert set(fig["translate"]) == {"es", "de", "fr", "ja"}
    assert all(t["clips"] == PART_CLIPS for t in fig["translate"].values())
    chrf, ref_chrf = (sum(t["chrf"] for t in f["translate"].values()) / 4 for f in (fig, ref))
    assert chrf > ref_chrf, (fig["translate"], ref["translate"])
    assert fig["nonspeech_empty_share"] >= MIN_EMPTY_SHARE, fig
    # a pinned language is answered in it (the reference's count is no bound: the module docstring)
    elsewhere = fig["pinned_other_language"]
    assert elsewhere <= MAX_PINNED_ELSEWHERE, (elsewhere, fig["languages"])
    assert report["seconds"]["total"] > 0 and Path(report["plots"][0]).is_file()


def _summary(fig: dict) -> list[str]:
    from speechlm.demo import multilingual_report

    return multilingual_report.summary_lines(fig)


def test_short_multilingual_demo_writes_its_report(tmp_path):
    """The command's every stage on the tiny twins in seconds (two languages, a few steps): the report's
    figures for each language and task, and the run's files."""
    recipe = yaml.safe_load(_small_recipe(tmp_path).read_text())
    for source in recipe["sources"]:
        settings = source.get("multilingual") or source["synthetic"]
        settings.update(train=8, eval=2, test=6 if "multilingual" in source else 2)
        if "multilingual" in source:
            settings.update(unseen_test=1, random_test=1, translate_test=0 if settings["language"] == "en" else 1)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(recipe))
    from speechlm.commands import demo

    tiny = ["model.audio_model_id=tiny/whisper", "model.text_model_id=tiny/llama3", "model.projector_hidden_dim=64"]
    tiny += ["model.lora_rank=4", "model.lora_alpha=8", "model.max_new_tokens=8"]
    steps = ["training.max_steps=4", "training.ctc_warmup_steps=2", "training.eval_steps=2", "training.save_steps=2"]
    steps += ["training.warmup_steps=1", "training.eval_transcribe_clips=4"]
    args = ["--languages", "es,en", "--shards", str(path), "--out", str(tmp_path / "out"), "--name", "short"]
    out = demo.main([*args, *tiny, *steps])
    fig = out["figures"]
    assert out["languages"] == ["en", "es"] and set(fig["languages"]) == {"en", "es"}
    for lang, v in fig["languages"].items():
        assert {"seen", "unseen", "random"} <= set(v) and v["pinned_clips"] == 6, (lang, v)
    assert set(fig["translate"]) == {"es"} and fig["translate"]["es"]["clips"] == 1
    assert 0.0 <= fig["nonspeech_empty_share"] <= 1.0 and "lid" in fig
    assert 0.0 <= fig["nonspeech_pinned_empty_share"] <= 1.0  # the non-speech clips pinned to es, en in turn
    report = json.loads((Path(out["run_dir"]) / "multilingual_report.json").read_text())
    assert len(report["rows"]) == 2 * 6 + 2 and report["figures"]["languages"] == fig["languages"]
    assert len(out["eval_loss"]) == 2 and Path(out["plots"][0]).is_file()
