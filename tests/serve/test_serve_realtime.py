"""The realtime transcription WebSocket (speechlm/serve/realtime.py, /v1/realtime?intent=transcription)
on 127.0.0.1 against the tiny twin: a session through the official `openai` SDK's realtime client
(manual commits; the transcript is what the library's `Streamer` commits on the same audio), server
VAD turns cut at the recording's pauses, bad frames answered with error events while the session goes
on, a wrong key refused before the socket opens, a dropped connection freeing its slot, and SIGTERM
committing what a session holds before closing it. Every wait is bounded."""

from __future__ import annotations

import base64
import json
import signal
import time

import numpy as np
import pytest
import soxr
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from serve_helpers import KEY, LIMITS, SR, Server
from speechlm import audio

RATE = 24000  # OpenAI's audio/pcm rate: the server resamples it to 16 kHz


def _pcm24(wave16: np.ndarray) -> bytes:
    return (np.clip(soxr.resample(wave16, SR, RATE), -1, 1) * 32767).astype("<i2").tobytes()


def _append(pcm: bytes) -> dict:
    return {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}


def _session(turn_detection) -> dict:
    audio_in = {"format": {"type": "audio/pcm", "rate": RATE}, "transcription": {"model": "twin", "language": "en"}}
    return {
        "type": "session.update",
        "session": {"type": "transcription", "audio": {"input": {**audio_in, "turn_detection": turn_detection}}},
    }


def _ws(server, key: str = KEY):
    url = server.url.replace("http", "ws") + "/v1/realtime?intent=transcription"
    return connect(url, additional_headers={"Authorization": f"Bearer {key}"}, open_timeout=30, close_timeout=5)


def _until(ws, kind: str, timeout: float = 120) -> list[dict]:
    """Events up to and including the first of type `kind`."""
    events, deadline = [], time.time() + timeout
    while True:
        events.append(json.loads(ws.recv(timeout=max(0.1, deadline - time.time()))))
        if events[-1]["type"] == kind:
            return events


def _streamed(model, pcm: bytes) -> str:
    """What the library's Streamer commits for one append of `pcm` then a commit (the server's steps:
    the resampler's output, its flushed tail, finish)."""
    from speechlm.inference import Streamer

    x = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0
    rs = soxr.ResampleStream(RATE, SR, 1, dtype="float32")
    stream = Streamer(model)
    for piece in (rs.resample_chunk(x), rs.resample_chunk(np.zeros(0, np.float32), last=True)):
        if len(piece):
            stream.feed(np.asarray(piece, np.float32))
    return stream.finish()[-1].text


@pytest.fixture(scope="module")
def model(twin):
    from speechlm.model import from_pretrained

    return from_pretrained(twin)


def test_a_session_through_the_openai_realtime_client_transcribes_each_commit(server, clips, model):
    paths, _ = clips
    pcms = [_pcm24(audio.load(str(p))) for p in paths[:2]]
    client = server.client()
    with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        created = conn.recv()
        assert created.type == "session.created" and created.session.type == "transcription"
        conn.send(_session(None))
        updated = conn.recv()
        assert updated.type == "session.updated" and updated.session.audio.input.turn_detection is None
        items = []
        for pcm in pcms:  # one append each: the Streamer's pieces, so its text is known
            conn.send(_append(pcm))
            conn.send({"type": "input_audio_buffer.commit"})
            events = []
            while not events or events[-1].type != "conversation.item.input_audio_transcription.completed":
                events.append(conn.recv())
            items.append(events)
    previous = None
    for pcm, events in zip(pcms, items):
        kinds = [e.type for e in events]
        committed = kinds.index("input_audio_buffer.committed")
        assert set(kinds) <= {
            "input_audio_buffer.committed",
            "conversation.item.input_audio_transcription.delta",
            kinds[-1],
        }
        done = events[-1]
        deltas = [e.delta for e in events if e.type.endswith(".delta")]
        assert done.transcript == "".join(deltas) == _streamed(model, pcm) != ""
        assert {e.item_id for e in events} == {done.item_id} and events[committed].previous_item_id == previous
        assert done.usage.type == "tokens" and done.usage.output_tokens > 0
        previous = done.item_id
    assert server.health()["requests_in_flight"] == 0


def test_server_vad_commits_a_turn_at_each_pause(server, clips):
    paths, _ = clips
    waves = [audio.load(str(p)) for p in paths[:3]]
    gap = np.zeros(int(1.0 * SR), np.float32)
    starts, ends, t = [], [], 0.5
    for w in waves:
        starts.append(t)
        ends.append(t + len(w) / SR)
        t += len(w) / SR + len(gap) / SR
    pcm = _pcm24(np.concatenate([gap[: SR // 2], *[x for w in waves for x in (w, gap)]]))
    with _ws(server) as ws:
        _until(ws, "session.created")
        ws.send(json.dumps(_session({"type": "server_vad", "silence_duration_ms": 500, "prefix_padding_ms": 0})))
        _until(ws, "session.updated")
        step = RATE * 2 // 10  # 100 ms appends
        for i in range(0, len(pcm), step):
            ws.send(json.dumps(_append(pcm[i : i + step])))
        events = []
        for _ in waves:
            events += _until(ws, "conversation.item.input_audio_transcription.completed")
    kinds = [e["type"] for e in events]
    began = [e["audio_start_ms"] / 1000 for e in events if e["type"] == "input_audio_buffer.speech_started"]
    stopped = [e["audio_end_ms"] / 1000 for e in events if e["type"] == "input_audio_buffer.speech_stopped"]
    assert kinds.count("input_audio_buffer.committed") == len(waves) == len(began) == len(stopped)
    # the turns' edges are the sentences' (their speech starts and ends a little inside the clip)
    assert all(s - 0.05 <= b <= s + 0.5 for s, b in zip(starts, began))
    assert all(e - 0.6 <= x <= e + 0.05 for e, x in zip(ends, stopped))
    for item in {e["item_id"] for e in events}:
        mine = [e for e in events if e["item_id"] == item]
        order = [e["type"].rsplit(".", 1)[-1] for e in mine if not e["type"].endswith("delta")]
        assert order == ["speech_started", "speech_stopped", "committed", "completed"]
        assert mine[-1]["transcript"] == "".join(e["delta"] for e in mine if e["type"].endswith(".delta")) != ""


@pytest.mark.parametrize(
    "message, code, param",
    [
        ("not json", "invalid_json", None),
        (json.dumps({"type": "input_audio_buffer.append", "audio": "%%%"}), "invalid_audio", "audio"),
        (json.dumps(_append(b"\x01\x02\x03")), "invalid_audio", "audio"),  # an odd byte count
        (json.dumps({"type": "response.create"}), "unknown_event", "type"),
        (json.dumps({"type": "input_audio_buffer.commit"}), "input_audio_buffer_commit_empty", None),
        (
            json.dumps(_session({"type": "semantic_vad"})),
            "unsupported_value",
            "session.audio.input.turn_detection.type",
        ),
        (
            json.dumps(
                {
                    "type": "session.update",
                    "session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 8000}}}},
                }
            ),
            "unsupported_value",
            "session.audio.input.format.rate",
        ),
        (
            json.dumps(
                {"type": "session.update", "session": {"audio": {"input": {"transcription": {"language": "fr"}}}}}
            ),
            "unsupported_language",
            "session.audio.input.transcription.language",
        ),
        (
            json.dumps({"type": "session.update", "session": {"audio": {"input": {"transcription": {"prompt": 5}}}}}),
            "invalid_value",
            "session.audio.input.transcription.prompt",
        ),
        (b"\x00\x01", "invalid_message", None),  # a binary frame
    ],
)
def test_a_bad_frame_is_an_error_event_and_the_session_goes_on(server, clips, message, code, param):
    with _ws(server) as ws:
        _until(ws, "session.created")
        ws.send(message)
        (err,) = _until(ws, "error", timeout=30)
        assert err["error"]["code"] == code and err["error"]["param"] == param and err["error"]["message"]
        ws.send(json.dumps(_session(None)))  # still listening
        assert _until(ws, "session.updated", timeout=30)[-1]["session"]["audio"]["input"]["format"]["rate"] == RATE


def test_a_wrong_key_or_intent_is_refused_before_the_socket_opens(server):
    for key, status, code in [("wrong", 401, "invalid_api_key")]:
        with pytest.raises(InvalidStatus) as e:
            _ws(server, key)
        assert e.value.response.status_code == status
        assert json.loads(e.value.response.body)["error"]["code"] == code
    with pytest.raises(InvalidStatus) as e:
        connect(
            server.url.replace("http", "ws") + "/v1/realtime?model=twin",
            additional_headers={"Authorization": f"Bearer {KEY}"},
        )
    assert e.value.response.status_code == 400 and json.loads(e.value.response.body)["error"]["param"] == "intent"


def test_a_dropped_connection_frees_its_slot(server, clips):
    _, recording = clips
    before = server.health()["requests"]["disconnected"]
    pcm = _pcm24(audio.load(str(recording))[: 20 * SR])
    ws = connect(
        server.url.replace("http", "ws") + "/v1/realtime?intent=transcription",
        additional_headers={"Authorization": f"Bearer {KEY}"},
        open_timeout=30,
    ).__enter__()
    _until(ws, "session.created")
    ws.send(json.dumps(_session(None)))
    for i in range(0, len(pcm), RATE):
        ws.send(json.dumps(_append(pcm[i : i + RATE])))
    ws.socket.close()  # gone without a closing handshake, decodes queued
    deadline = time.time() + 60
    while (h := server.health())["requests_in_flight"] or h["requests"]["disconnected"] == before:
        assert time.time() < deadline, f"the session was never let go: {h}"
        time.sleep(0.1)
    assert h["batcher"]["segments_waiting"] == 0 and h["status"] == "ok"
    assert h["requests"]["server_errors"] == 0  # a drop is no fault of the server's


def test_sigterm_commits_what_a_session_holds_then_closes_it(twin, clips, tmp_path):
    paths, _ = clips
    s = Server(twin, tmp_path / "server.log", "--served-model-name", "twin", "--shutdown-timeout", "30", *LIMITS)
    try:
        with _ws(s) as ws:
            _until(ws, "session.created")
            ws.send(json.dumps(_session(None)))
            _until(ws, "session.updated")
            ws.send(json.dumps(_append(_pcm24(audio.load(str(paths[0]))))))
            time.sleep(0.5)
            s.proc.send_signal(signal.SIGTERM)
            events = _until(ws, "error", timeout=60)
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
        assert closed.value.rcvd.code == 1001
        kinds = [e["type"] for e in events]
        assert kinds[-2:] == ["conversation.item.input_audio_transcription.completed", "error"]
        assert events[-2]["transcript"] and events[-1]["error"]["code"] == "shutting_down"
        assert s.proc.wait(30) == 0
    finally:
        s.stop()
    assert KEY not in (tmp_path / "server.log").read_text()
