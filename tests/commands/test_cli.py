"""The `speechlm` command (speechlm/commands/): every subcommand's help with an example, the errors a
mistyped command gets, `speechlm plan` offline, and (slow) `speechlm train` alone and under deepspeed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paths import REPO
from speechlm import commands as cli
from tests.infra.daemons import free_port

RUNPOD = ["plan", "up", "wait", "deploy", "train", "attach", "checkpoint", "down"]
HELP = [[name] for name in cli.COMMANDS] + [["runpod", sub] for sub in RUNPOD] + [["shard", "merge"]]


def env() -> dict:
    # the worktree's package first, for children of children too; offline like every test
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def run_help(capsys, words: list[str]) -> str:
    with pytest.raises(SystemExit) as e:
        cli.main([*words, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("words", HELP, ids=" ".join)
def test_every_subcommand_help_has_usage_and_an_example(capsys, words):
    out = run_help(capsys, words)
    command = "speechlm " + " ".join(words)
    assert out.startswith(f"usage: {command} "), out[:200]
    examples = [line.strip() for line in out.splitlines() if line.startswith("  speechlm ")]
    assert any(line.startswith(command + " ") for line in examples), out  # an example of this very command


def test_runpod_help_names_every_runpod_subcommand(capsys):
    usage = run_help(capsys, ["runpod"]).split("\n\n")[0]
    assert re.search(r"\{([a-z,]+)\}", usage).group(1).split(",") == RUNPOD


def test_top_level_help_lists_each_subcommand_without_importing_the_jobs():
    # the entry point as a fresh process runs it: `python -m speechlm --help`
    r = subprocess.run(
        [sys.executable, "-m", "speechlm", "--help"], capture_output=True, text=True, env=env(), timeout=60
    )
    assert r.returncode == 0, r.stderr
    for name, line in cli.COMMANDS.items():
        assert re.search(rf"^\s+{name}\s+{re.escape(line)}$", r.stdout, re.M), (name, r.stdout)
    assert "\n  speechlm train --config tiny" in r.stdout
    # the help imports no job module, nor torch: only the chosen subcommand's module is ever imported
    probe = (
        "import sys\nfrom speechlm import commands\ntry:\n    commands.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('speechlm', 'torch', 'deepspeed')))"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env(), timeout=60)
    assert r.returncode == 0, r.stderr
    # (speechlm.quiet: the notice filters, stdlib only)
    assert r.stdout.split("\n")[-2] == "['speechlm', 'speechlm.commands', 'speechlm.quiet']"


def test_console_script_when_installed():
    script = Path(sys.executable).parent / "speechlm"
    if not script.is_file():
        pytest.skip(f"no {script}: `pip install -e .` puts it there")
    r = subprocess.run([str(script), "--help"], capture_output=True, text=True, env=env(), timeout=60)
    assert r.returncode == 0 and "usage: speechlm" in r.stdout and "runpod" in r.stdout, r.stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (["trian", "--config", "tiny"], "argument COMMAND: invalid choice: 'trian' (choose from 'train', "),
        ([], "the following arguments are required: COMMAND"),
        (["--config", "tiny"], "argument COMMAND: invalid choice: 'tiny'"),  # options come after the command
    ],
)
def test_unknown_or_missing_subcommand_exits_2(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: speechlm ") and message in err, err


def test_local_rank_before_the_subcommand_reaches_train(capsys):
    # deepspeed's launcher runs `speechlm --local_rank=N train ...`: train accepts it, so the next
    # complaint is the recipe's, not an unknown option
    with pytest.raises(SystemExit) as e:
        cli.main(["--local_rank=1", "train", "--config", "no_such_recipe"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "no_such_recipe" in err and "unrecognized" not in err and "COMMAND" not in err, err
    assert cli.split_local_rank(["--local-rank", "3", "train", "x=1"]) == (["--local-rank", "3"], ["train", "x=1"])


def test_plan_prints_the_planners_report(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("SPEECHLM_DEVICE_MEMORY_GIB", raising=False)
    assert cli.main(["plan", "--config", "tiny", "--world-size", "2"]) == 0
    out = capsys.readouterr().out
    from speechlm.config import Config, load
    from speechlm.plan import make_plan, report

    assert out == report(make_plan(load(Config, "tiny", None, []), world=2)) + "\n"
    assert "tiny/qwen3_5" in out and "world size 2" in out
    assert cli.main(["plan", "--config", "tiny", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["per_device_train_batch_size"] == 8


# --------------------------------------------------------------------------- training (slow)


def launcher(form: str) -> list[str]:
    if form == "plain":
        return [sys.executable, "-m", "speechlm"]  # what the console script runs: speechlm.commands.main
    ds = shutil.which("deepspeed") or str(Path(sys.executable).parent / "deepspeed")
    return [ds, "--num_gpus=2", f"--master_port={free_port()}", "--module", "speechlm"]


@pytest.mark.slow
@pytest.mark.parametrize("form, world", [("plain", 1), ("deepspeed", 2)])
def test_train_trains_and_saves(tmp_path, synthetic_shards, form, world):
    args = [
        "train",
        "--config",
        "tiny",
        "training.max_steps=2",
        "training.save_steps=2",
        "training.eval_steps=0",
        "training.logging_steps=1",
        f"training.output_dir={tmp_path}",
        "training.run_name=run",
        f"data.train=[{{path: {synthetic_shards}, split: train}}]",
        "data.eval=[]",
        "data.num_workers=0",
    ]
    r = subprocess.run(launcher(form) + args, cwd=tmp_path, capture_output=True, text=True, env=env(), timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run = tmp_path / "run"
    assert (run / "checkpoints" / "latest").read_text().strip() == "step-2"
    assert (run / "checkpoints" / "step-2" / "trainer_state.json").is_file()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["world_size"] == world and [r["step"] for r in rows if "train/loss" in r] == [1, 2]
    if form == "plain":  # the trained run, written as a transformers folder by `speechlm export`
        r = subprocess.run(
            [sys.executable, "-m", "speechlm", "export", str(run), str(tmp_path / "hf")],
            capture_output=True,
            text=True,
            env=env(),
            timeout=300,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        assert r.stdout.strip().splitlines()[-1] == str(tmp_path / "hf")
        assert (tmp_path / "hf" / "config.json").is_file() and (tmp_path / "hf" / "model.safetensors").is_file()
