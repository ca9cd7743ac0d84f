"""Recipes that cannot do what was asked are said at start (issue 35, mistakes 6 and 10)."""

from __future__ import annotations

import pytest

from speechlm.commands.train import main
from speechlm.config import Config, load
from speechlm.train import sanity


def test_6_a_run_within_its_ctc_warm_start_is_said():
    cfg = load(Config, "demo", None, ["training.max_steps=20"])
    (line,) = sanity.schedule_warnings(cfg, 20)
    assert "the run's 20 steps are all within training.ctc_warmup_steps=300" in line
    assert "LM loss and LoRA never do" in line and "training.ctc_warmup_steps=15" in line
    assert sanity.schedule_warnings(cfg, 380) == []  # the demo's own 300 + 80 steps


def test_6_a_warmup_longer_than_the_run_is_said():
    cfg = load(Config, "small", None, [])  # warmup_steps 500, no CTC warm start
    (line,) = sanity.schedule_warnings(cfg, 100)
    assert "training.warmup_steps=500 is not shorter than the run's 100 steps" in line and "e.g. 10" in line
    assert sanity.schedule_warnings(cfg, 5000) == []


def test_10_grad_norms_of_a_phase_first_steps_are_not_spikes():
    assert [sanity.settling(s, 0) for s in (1, 4, 10, 11)] == [True, True, True, False]
    # the demo's phases: CTC from step 1, the LM loss from step 301
    assert [sanity.settling(s, 300) for s in (1, 11, 300, 301, 310, 311)] == [True, False, False, True, True, False]


def test_10_small_runs_offline_or_says_which_ids_would(monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SystemExit) as e:
        main(["--config", "small"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "hub_model_id" not in err  # the small recipe pushes nothing by default
    assert "'openai/whisper-tiny.en' is a Hub id" in err and "'offline/whisper-tiny.en'" in err


def test_10_a_push_with_the_hub_off_is_said(monkeypatch, caplog):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sanity.check_hub(load(Config, "small", None, ["training.push_to_hub=true", "training.hub_model_id=me/x"]))
    assert "HF_HUB_OFFLINE is set, so every upload will fail" in caplog.text
