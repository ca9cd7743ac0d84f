"""Checkpoints load where they were trained (speechlm/inference/bases.py, issue 36): a checkpoint of a
run on a local decoder finds it from the run's resolved config, with no flag, through every command
that takes -m (transcribe, eval, export, and serve's engine); a copy elsewhere needs `--base
decoder=PATH`, which the error names; a wrong folder fails its sha256; a missing local model path is
"no such folder", not a Hub lookup (finding 8). The real trainer's run, killed: tests/train/test_train_local_base.py."""

from __future__ import annotations

import json
import shutil

import pytest
import soundfile as sf

from model_helpers import trained_looking, waves
from speechlm import inference
from speechlm.config import ConfigError
from speechlm.model import ids, save_pretrained


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run folder as the trainer leaves it: RUN/checkpoints/step-2/{model/, trainer_state.json} and
    `latest`, the resolved config naming the local decoder by its path; and a clip to transcribe."""
    tmp = tmp_path_factory.mktemp("local-base")
    decoder = tmp / "models" / "my-decoder"
    shutil.copytree(ids.resolve("tiny/qwen3_5"), decoder)
    model = trained_looking("tiny/whisper", str(decoder))
    step = tmp / "outputs" / "RUN" / "checkpoints" / "step-2"
    save_pretrained(model, step / "model")
    cfg = {"model": {"audio_model_id": "tiny/whisper", "text_model_id": str(decoder)}, "training": {}}
    (step / "trainer_state.json").write_text(json.dumps({"step": 2, "config": cfg}))
    (step.parent / "latest").write_text("step-2")
    sf.write(tmp / "clip.wav", waves((16000,), seed=2)[0], 16000)
    expected = inference.transcribe_waves(model, [waves((16000,), seed=2)[0]])
    return {"tmp": tmp, "decoder": decoder, "run": step.parent.parent, "step": step, "expected": expected}


def test_the_folder_names_the_local_base_by_name_and_hash_only(run):
    bases = json.loads((run["step"] / "model" / "config.json").read_text())["bases"]
    assert bases["decoder"]["source"] == "local" and bases["decoder"]["id"] == "my-decoder"
    assert str(run["tmp"]) not in json.dumps(bases)
    assert inference.run_bases(run["step"] / "model") == {"decoder": str(run["decoder"])}


@pytest.mark.parametrize("which", ["run", "step", "model"])
def test_every_form_of_a_checkpoint_loads_on_the_training_machine_with_no_flag(run, which):
    path = {"run": run["run"], "step": run["step"], "model": run["step"] / "model"}[which]
    model = inference.load_model(str(path))
    assert inference.transcribe_waves(model, [waves((16000,), seed=2)[0]]) == run["expected"]


def test_the_cli_commands_load_it_with_no_flag(run, capsys, tmp_path):
    from speechlm.commands import eval as eval_cli
    from speechlm.commands import transcribe
    from speechlm.commands.export import main as export

    texts = transcribe.main(["-m", str(run["step"]), str(run["tmp"] / "clip.wav")])
    assert texts == run["expected"]
    manifest = tmp_path / "set.jsonl"
    manifest.write_text(json.dumps({"id": "c1", "audio": str(run["tmp"] / "clip.wav"), "text": "hello"}) + "\n")
    res = eval_cli.main(["-m", str(run["step"]), "-d", str(manifest), "--out", str(tmp_path / "eval"), "--json"])
    assert (
        res[0]["clips"] == 1
        and json.loads((tmp_path / "eval" / "set.jsonl").read_text())["hypothesis"] == (run["expected"][0])
    )
    export([str(run["step"]), str(tmp_path / "final")])
    moved = tmp_path / "elsewhere"
    shutil.move(str(tmp_path / "final"), moved)  # self-contained: loads with no run and no flag
    assert (
        inference.transcribe_waves(inference.load_model(str(moved)), [waves((16000,), seed=2)[0]]) == (run["expected"])
    )


def test_the_server_engine_loads_it_with_no_flag_and_a_copy_with_base(run, tmp_path):
    from speechlm.commands.serve import build_parser
    from speechlm.inference import bases_from_args
    from speechlm.serve.engine import Engine

    assert Engine.load(str(run["step"])).model.bases["decoder"]["id"] == "my-decoder"
    copy = shutil.copytree(run["step"] / "model", tmp_path / "copy")
    args = build_parser().parse_args([str(copy), "--base", f"decoder={run['decoder']}"])
    engine = Engine.load(args.model, bases=bases_from_args(args))
    assert inference.transcribe_waves(engine.model, [waves((16000,), seed=2)[0]]) == run["expected"]


def test_a_copy_elsewhere_needs_base_which_the_error_names(run, tmp_path, capsys):
    from speechlm.commands import transcribe
    from speechlm.commands.export import main as export

    copy = shutil.copytree(run["step"], tmp_path / "step-2")  # no run around it: no config to find the base
    with pytest.raises(ConfigError, match=r"local model 'my-decoder'.*`--base decoder=PATH`"):
        inference.load_model(str(copy))
    clip = str(run["tmp"] / "clip.wav")
    assert transcribe.main(["-m", str(copy), clip, "--base", f"decoder={run['decoder']}"]) == run["expected"]
    export([str(copy), str(tmp_path / "out"), "--base", f"decoder={run['decoder']}"])
    assert (tmp_path / "out" / "decoder" / "model.safetensors").is_file()
    # another folder of the same name is not the base the model was trained on
    wrong = tmp_path / "other" / "my-decoder"
    shutil.copytree(ids.resolve("tiny/qwen3"), wrong)
    with pytest.raises(ConfigError, match="not the ones this model was trained on"):
        inference.load_model(str(copy), {"decoder": str(wrong)})


@pytest.mark.parametrize(
    "flag,message",
    [
        ("decoder", "expected PART=PATH"),
        ("projector=/x", "expected PART=PATH"),
        ("decoder=/no/such/folder", "no such folder"),
    ],
)
def test_base_flags_are_checked_before_anything_loads(flag, message, capsys):
    from speechlm.commands import transcribe

    with pytest.raises(SystemExit) as e:
        transcribe.main(["-m", "/no/model", "/no/clip.wav", "--base", flag])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_a_missing_local_model_path_is_no_such_folder(tmp_path, monkeypatch):
    """Finding 8: `speechlm serve out/demo` with no such folder printed three chained Hub tracebacks."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    with pytest.raises(ConfigError, match=r"model 'out/demo': no such folder"):
        inference.load_model("out/demo")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(ConfigError, match="is a file, not a model folder"):
        inference.load_model("a-file")
    # a Hub id that can't be fetched (offline here): one line, no traceback chain
    with pytest.raises(ConfigError, match=r"model 'nobody/no-such-model': no such folder, and no Hub model") as e:
        inference.load_model("nobody/no-such-model")
    assert e.value.__cause__ is None and e.value.__suppress_context__
