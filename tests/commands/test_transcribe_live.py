"""`speechlm transcribe --live` (speechlm/commands/transcribe.py over speechlm/inference/live.py): raw
s16le PCM from stdin printed as a live stream commits it, the text the library's `Streamer` commits
for the same samples (fed in the same 0.1 s pieces, however the writer timed its bytes: a real pipe
fed in uneven bursts); `--format jsonl` of the committed words and their times; bad input and bad
flag combinations named."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from model_helpers import trained_looking
from paths import REPO
from speechlm.commands import transcribe

SR = 16000


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    from speechlm.model import save_pretrained

    m = trained_looking("tiny/whisper", "tiny/qwen3", bf16=False)
    m.cfg.max_new_tokens = 8
    return m, str(save_pretrained(m, tmp_path_factory.mktemp("m") / "model"))


def _pcm() -> tuple[np.ndarray, bytes]:
    """Noise bursts and silences (pauses close the stream's window) as s16le, and their float samples."""
    rng = np.random.default_rng(7)
    parts = [(1.2, 0.1), (0.6, 0), (0.9, 0.1), (0.5, 0), (1.0, 0.05)]
    wave = np.concatenate([(lvl * rng.standard_normal(int(s * SR))).astype(np.float32) for s, lvl in parts])
    pcm = (np.clip(wave, -1, 1) * 32767).astype("<i2")
    return pcm.astype(np.float32) / 32768.0, pcm.tobytes()


def _stdin(monkeypatch, data: bytes):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_live_prints_what_the_stream_commits_and_jsonl_its_words(twin, monkeypatch, capsys):
    from speechlm.model import from_pretrained
    from speechlm.model.longform.streaming import stream_wave

    _, folder = twin
    wave, pcm = _pcm()
    events = list(stream_wave(from_pretrained(folder), wave, piece_seconds=0.1))
    expected = events[-1].text
    assert expected and len([e for e in events if e.delta]) >= 2  # committed in steps, not at the end only

    _stdin(monkeypatch, pcm)
    assert transcribe.main(["-m", folder, "--live", "-"]) == expected
    assert capsys.readouterr().out == expected + "\n"

    _stdin(monkeypatch, pcm)
    transcribe.main(["-m", folder, "--live", "-", "--format", "jsonl"])
    words = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [w["word"] for w in words] == expected.split()
    committed = [w for e in events for w in e.words]
    assert [(w["start"], w["end"]) for w in words] == [(w["start"], w["end"]) for w in committed]
    placed = [w for w in words if w["start"] is not None]
    assert placed and all(0 <= w["start"] <= w["end"] <= len(wave) / SR + 0.02 for w in placed)  # a frame or two


def test_a_real_pipe_fed_in_uneven_bursts_gives_the_same_text(twin, tmp_path):
    _, folder = twin
    wave, pcm = _pcm()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "speechlm", "transcribe", "--live", "-m", folder, "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    rng = np.random.default_rng(1)
    i = 0
    while i < len(pcm):
        n = int(rng.integers(1, 9000))  # odd sizes too: half a sample waits for its other byte
        proc.stdin.write(pcm[i : i + n])
        proc.stdin.flush()
        i += n
        time.sleep(float(rng.uniform(0, 0.02)))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()[-2000:]
    printed = out.decode()
    from speechlm.model import from_pretrained
    from speechlm.model.longform.streaming import stream_wave

    assert printed == [e for e in stream_wave(from_pretrained(folder), wave, piece_seconds=0.1)][-1].text + "\n"


def _code(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        transcribe.main(argv)
    return e.value.code, capsys.readouterr().err


def test_bad_live_input_and_flags_are_named(twin, tmp_path, monkeypatch, capsys):
    _, folder = twin
    _stdin(monkeypatch, b"\x00\x01" * 8000 + b"\x07")  # half a sample at the end
    code, err = _code(["-m", folder, "--live", "-"], capsys)
    assert code != 0 and "half a sample" in err
    for argv, said in [
        (["-m", folder, "a.wav", "--format", "jsonl"], "--format jsonl"),
        (["-m", folder, "--live", "-", "b.raw"], "one input"),
        (["-m", folder, "--live", "-", "--format", "srt"], "--format srt"),
        (["-m", folder, "--live", str(tmp_path / "none.raw")], "no such audio file"),
    ]:
        code, err = _code(argv, capsys)
        assert code != 0 and said in err, (argv, err)


def test_live_asks_every_decode_the_language_task_and_prompt(twin, monkeypatch, capsys):
    """`--live --prompt` (and `--language`, `--task`) reach every decode of the stream: its text is the
    library's Streamer's over the model asked the same (`inference.live.Asking`)."""
    from speechlm.inference.live import Asking
    from speechlm.model import from_pretrained
    from speechlm.model.longform.streaming import stream_wave

    _, folder = twin
    wave, pcm = _pcm()
    model = from_pretrained(folder)
    asked = {"language": None, "task": "transcribe", "context": "uno dos tres"}
    expected = list(stream_wave(Asking(model, asked), wave, piece_seconds=0.1))[-1].text
    assert expected != list(stream_wave(model, wave, piece_seconds=0.1))[-1].text
    _stdin(monkeypatch, pcm)
    assert transcribe.main(["-m", folder, "--live", "-", "--prompt", "uno dos tres"]) == expected
