"""`speechlm transcribe` (speechlm/commands/transcribe.py): a bad file fails alone and is named, the exit
status says some failed; no output ever overwrites an input, another output or an existing file, and
every such clash is found before any work (issue 36, findings 4 and 9)."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest
import soundfile as sf

from model_helpers import trained_looking, waves
from speechlm import inference
from speechlm.commands import transcribe

LANGUAGES = ["en", "es", "de", "fr", "ja"]


def _saved(tmp_path_factory, languages: list[str]) -> str:
    from speechlm.model import save_pretrained

    model = trained_looking("tiny/whisper", "tiny/qwen3_5")
    model.cfg.languages = languages
    return str(save_pretrained(model, tmp_path_factory.mktemp("m") / "model"))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A twin that serves five languages (`model.languages`)."""
    return _saved(tmp_path_factory, LANGUAGES)


@pytest.fixture(scope="module")
def english_dir(tmp_path_factory):
    """A twin that lists no languages: English only, trained on prompts that state none."""
    return _saved(tmp_path_factory, [])


def _wav(path, wave, subtype="PCM_16"):
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, wave, 16000, format="WAV", subtype=subtype)
    return str(path)


def _run(argv, capsys) -> tuple[int, str, str]:
    try:
        transcribe.main(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def test_a_bad_file_fails_alone_and_the_others_keep_their_text(tmp_path, model_dir, capsys):
    """Issue 36: `transcribe tiny.wav good.wav` crashed and good.wav was never transcribed. Now a clip
    of 5 samples is transcribed (as the silence it is, padded to the encoder's smallest input), a file
    cut after 6 samples too, and files that are no audio are named on stderr; exit status 1."""
    a, b = waves((16000, 24000), seed=3)
    good = [_wav(tmp_path / "good1.wav", a), _wav(tmp_path / "good2.wav", b)]
    code, out, _ = _run(["-m", model_dir, *good], capsys)
    alone = dict(line.split("\t") for line in out.splitlines())
    assert code == 0 and set(alone) == set(good)

    tiny = _wav(tmp_path / "tiny.wav", waves((5,), seed=4)[0])
    buf = io.BytesIO()
    sf.write(buf, waves((16000,), seed=5)[0], 16000, format="WAV", subtype="PCM_16")
    cut = tmp_path / "cut.wav"
    cut.write_bytes(buf.getvalue()[: 44 + 12])  # the header and 6 samples: the rest of the data lost
    nan = _wav(tmp_path / "nan.wav", np.array([0.1, np.nan, 0.2] * 100, np.float32), "FLOAT")
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"RIFF\x00\x00\x00\x00WAVEfmt definitely not audio")
    argv = ["-m", model_dir, good[0], tiny, str(cut), nan, str(junk), good[1]]
    code, out, err = _run(argv, capsys)
    got = dict(line.split("\t") for line in out.splitlines())
    assert code == transcribe.EXIT_SOME_FAILED
    assert set(got) == {good[0], tiny, str(cut), good[1]}
    assert got[good[0]] == alone[good[0]] and got[good[1]] == alone[good[1]]  # batch mates change nothing
    assert f"error: {nan}: non-finite samples" in err and f"error: {junk}: cannot decode" in err
    assert "2 of 6 files failed" in err


def test_each_file_gets_its_own_output_under_out_dir(tmp_path, model_dir, capsys):
    """Finding 4: `--format srt --out-dir D a/talk.wav b/talk.wav` wrote D/talk.srt twice."""
    a, b = waves((16000, 20000), seed=6)
    inputs = [_wav(tmp_path / "a" / "talk.wav", a), _wav(tmp_path / "b" / "talk.wav", b)]
    code, out, _ = _run(["-m", model_dir, *inputs, "--format", "srt", "--out-dir", str(tmp_path / "D")], capsys)
    assert code == 0
    assert out.split() == [str(tmp_path / "D" / "a" / "talk.srt"), str(tmp_path / "D" / "b" / "talk.srt")]
    assert all((tmp_path / "D" / d / "talk.srt").is_file() for d in "ab")


@pytest.mark.parametrize(
    "files,extra,message",
    [
        (["talk.wav", "talk.flac"], [], "would both write"),  # one output for two inputs, beside them
        (["a/talk.wav", "b/talk.flac"], ["--out-dir", "{tmp}/D", "--format", "json"], None),  # no clash
        (["voice.vtt"], ["--format", "vtt"], "is an input"),  # an audio file named like its subtitles
        (["talk.wav", "talk.srt"], [], "is an input"),  # talk.srt is audio too: talk.wav's output is it
        (["talk.wav"], ["--out-dir", "{tmp}/afile"], "a file, not a folder"),  # finding 9
        (["talk.wav"], ["--out-dir", "{tmp}/has"], "exists: pass --overwrite"),
    ],
)
def test_a_clash_is_an_error_before_any_work(tmp_path, capsys, files, extra, message):
    """Every clash is found before the model loads: the model given here does not exist, so an error
    about anything else proves the check came first. Nothing is written or replaced."""
    paths = []
    for f in files:
        p = tmp_path / f
        p.parent.mkdir(parents=True, exist_ok=True)
        sf.write(p, waves((1600,))[0], 16000, format="WAV" if p.suffix != ".flac" else "FLAC")
        paths.append(str(p))
    (tmp_path / "afile").write_text("not a folder")
    (tmp_path / "has").mkdir()
    (tmp_path / "has" / "talk.srt").write_text("an earlier transcript")
    before = {p: open(p, "rb").read() for p in paths}
    argv = ["-m", str(tmp_path / "no-such-model"), *paths, *[e.format(tmp=tmp_path) for e in extra]]
    if "--format" not in argv:
        argv += ["--format", "srt"]
    code, _, err = _run(argv, capsys)
    assert code == 2
    if message is None:  # no clash: the first error is the missing model
        assert "no-such-model" in err
    else:
        assert message in err and "no-such-model" not in err
    assert {p: open(p, "rb").read() for p in paths} == before
    assert (tmp_path / "has" / "talk.srt").read_text() == "an earlier transcript"


def test_overwrite_replaces_an_earlier_output_but_never_an_input(tmp_path, model_dir, capsys):
    clip = _wav(tmp_path / "talk.wav", waves((16000,), seed=7)[0])
    (tmp_path / "talk.json").write_text("{}")
    code, out, _ = _run(["-m", model_dir, clip, "--format", "json", "--overwrite"], capsys)
    assert code == 0 and out.strip() == str(tmp_path / "talk.json")
    assert '"words"' in (tmp_path / "talk.json").read_text()
    voice = _wav(tmp_path / "voice.json", waves((1600,))[0])
    code, _, err = _run(["-m", model_dir, voice, "--format", "json", "--overwrite"], capsys)
    assert code == 2 and "is an input" in err and sf.read(voice)[0].size == 1600


def test_cli_exit_status_through_the_speechlm_command(tmp_path, model_dir, monkeypatch, capsys):
    from speechlm.commands import main

    good = _wav(tmp_path / "good.wav", waves((16000,), seed=8)[0])
    (tmp_path / "bad.wav").write_bytes(b"no audio at all")
    monkeypatch.setattr(sys, "argv", ["speechlm"])
    with pytest.raises(SystemExit) as e:
        main(["transcribe", "-m", model_dir, good, str(tmp_path / "bad.wav")])
    out, err = capsys.readouterr()
    assert e.value.code == 1 and out.startswith(good + "\t") and "bad.wav: cannot decode" in err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--language", "xx"], "--language: unknown language 'xx'"),
        (["--task", "translate", "--format", "srt"], "word times are for transcription"),
    ],
)
def test_language_and_task_flags_are_checked_before_the_model_loads(tmp_path, capsys, extra, message):
    path = _wav(tmp_path / "hola.wav", waves((1600,))[0])
    code, _, err = _run(["-m", str(tmp_path / "no-such-model"), path, *extra], capsys)
    assert code == 2 and message in err and "no-such-model" not in err


def test_language_and_task_reach_the_model(tmp_path, model_dir, capsys):
    from speechlm.model import from_pretrained

    wave = waves((16000,))[0]
    path = _wav(tmp_path / "hola.wav", wave)
    code, out, _ = _run(["-m", model_dir, path, "--language", "de", "--task", "translate"], capsys)
    model = from_pretrained(model_dir)
    clip = sf.read(path, dtype="float32")[0]
    want = model.transcribe([clip], language="de", task="translate")[0]
    assert code == 0 and out.strip() == want
    # the prompt states the language and the task: some of them change this twin's answer
    asked = [(lang, t) for lang in (None, "es", "de", "fr", "ja") for t in ("transcribe", "translate")]
    assert len({model.transcribe([clip], language=lang, task=t)[0] for lang, t in asked}) > 1


def test_a_language_the_model_does_not_serve_is_an_error_naming_the_ones_it_does(tmp_path, model_dir, capsys):
    """As the server's 400 unsupported_language: never an answer to a prompt the model was not trained on."""
    path = _wav(tmp_path / "ciao.wav", waves((16000,))[0])
    code, out, err = _run(["-m", model_dir, path, "--language", "it"], capsys)
    assert code == 2 and out == ""
    assert "--language: language 'it' is not supported: this model serves en, es, de, fr, ja" in err


def test_an_english_only_model_takes_english_as_no_language_and_refuses_another(tmp_path, english_dir, capsys):
    from speechlm.model import from_pretrained

    path = _wav(tmp_path / "hello.wav", waves((16000,))[0])
    model = from_pretrained(english_dir)
    clip = sf.read(path, dtype="float32")[0]
    code, out, _ = _run(["-m", english_dir, path, "--language", "en"], capsys)
    # asked with the prompt it was trained on, which states no language, not "... The speech is in English."
    assert code == 0 and out.strip() == model.transcribe([clip])[0]
    assert inference.fitted(model, inference.Task("en")) == inference.Task()
    code, out, err = _run(["-m", english_dir, path, "--language", "es"], capsys)
    assert code == 2 and out == "" and "this model serves en (ISO 639-1 codes)" in err


def test_the_prompt_flag_is_context_the_model_reads(tmp_path, model_dir, capsys):
    """`--prompt` is OpenAI's prompt: context after the instruction (SpeechLM.transcribe's `context`)."""
    from speechlm.model import from_pretrained

    path = _wav(tmp_path / "hola.wav", waves((16000,))[0])
    model = from_pretrained(model_dir)
    clip = sf.read(path, dtype="float32")[0]
    answers = {}
    for context in ("Anna Karenina", "uno dos tres"):
        code, out, _ = _run(["-m", model_dir, path, "--prompt", context], capsys)
        answers[context] = out.strip()
        assert code == 0 and answers[context] == model.transcribe([clip], context=context)[0]
    assert len({*answers.values(), model.transcribe([clip])[0]}) > 1  # the context reaches this twin's answers
