"""Live transcription on the server (speechlm/serve/live.py): `stream=true` on
`POST /v1/audio/transcriptions` through the official `openai` client, against the shared tiny-twin
server (tests/serve/conftest.py). The events come in OpenAI's order and shapes; the final text is what
the library's `Streamer` commits on the same audio; the first words come long before the end of a long
file; a bad request is refused before any event; a client that hangs up frees its slot."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from serve_helpers import KEY
from speechlm import audio


@pytest.fixture(scope="module")
def streamed(twin, clips):
    """The library's stream of each clip and of the recording on the twin, as the server feeds a file
    (`stream_wave`, 0.1 s pieces, the default settings): {file name: final text}."""
    from speechlm.inference import stream_wave
    from speechlm.model import from_pretrained

    model = from_pretrained(twin)
    paths, recording = clips
    out = {}
    for p in [*paths[:2], recording]:
        out[p.name] = [e for e in stream_wave(model, audio.load(str(p)))][-1].text
    return out


def _events(client: openai.OpenAI, path, **kw) -> list[tuple[float, object]]:
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        stream = client.audio.transcriptions.create(model="twin", file=f, stream=True, **kw)
        return [(time.perf_counter() - t0, e) for e in stream]


def test_stream_true_sends_deltas_then_done_with_what_the_stream_committed(server, clips, streamed):
    paths, recording = clips
    client = server.client()
    for path in [*paths[:2], recording]:
        got = [e for _, e in _events(client, path)]
        assert [e.type for e in got[:-1]] == ["transcript.text.delta"] * (len(got) - 1)
        done = got[-1]
        assert done.type == "transcript.text.done"
        assert done.text == streamed[path.name] != ""
        assert "".join(e.delta for e in got[:-1]) == done.text  # the deltas only add
        seconds = audio.load(str(path)).size / audio.SAMPLE_RATE
        usage = done.usage
        assert usage.type == "tokens" and usage.output_tokens > 0
        assert usage.input_token_details.audio_tokens == usage.input_tokens > seconds  # > 1 audio token a second
        assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert server.health()["requests_in_flight"] == 0


def test_a_long_file_streams_its_first_words_long_before_its_end(server, clips):
    _, recording = clips
    timed = _events(server.client(), recording, response_format="text")
    deltas = [t for t, e in timed if e.type == "transcript.text.delta"]
    # 24 sentences: the first is committed at its pause, a few percent into the decoding
    assert len(deltas) >= 10 and deltas[0] < 0.25 * timed[-1][0]


@pytest.mark.parametrize(
    "fields",
    [
        {"response_format": "srt"},
        {"response_format": "verbose_json", "timestamp_granularities[]": "word"},
        {"stream": "maybe"},
    ],
)
def test_a_stream_it_cannot_send_is_refused_before_any_event(server, clips, fields):
    paths, _ = clips
    data = {"model": "twin", "stream": "true", **fields}
    r = httpx.post(
        server.url + "/v1/audio/transcriptions",
        files={"file": ("a.flac", paths[0].read_bytes())},
        data=data,
        headers={"authorization": f"Bearer {KEY}"},
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream"


def test_bad_audio_or_a_wrong_key_is_an_error_answer_not_a_stream(server):
    client = server.client()
    with pytest.raises(openai.BadRequestError, match="not usable audio"):
        client.audio.transcriptions.create(model="twin", file=("x.wav", b"RIFF0000WAVEjunk"), stream=True)
    with pytest.raises(openai.AuthenticationError):
        server.client("wrong-key").audio.transcriptions.create(
            model="twin", file=("x.wav", b"RIFF0000WAVEjunk"), stream=True
        )


def test_a_client_that_leaves_a_stream_frees_its_slot(server, clips, streamed):
    paths, recording = clips
    before = server.health()["requests"]
    with httpx.stream(
        "POST",
        server.url + "/v1/audio/transcriptions",
        files={"file": ("r.flac", recording.read_bytes())},
        data={"model": "twin", "stream": "true"},
        headers={"authorization": f"Bearer {KEY}"},
        timeout=60,
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        first = next(r.iter_lines())
        assert first.startswith("data: ") and '"transcript.text.delta"' in first
    deadline = time.time() + 30
    while server.health()["requests_in_flight"]:
        assert time.time() < deadline, "the stream's slot was never freed"
        time.sleep(0.05)
    after = server.health()
    assert after["requests"]["ok"] == before["ok"] + 1 and after["status"] == "ok"
    assert after["batcher"]["segments_waiting"] == 0  # its window's decode was called off, or done
    # the server goes on streaming for others
    assert _events(server.client(), paths[0])[-1][1].text == streamed[paths[0].name]
