"""Two servers of one model (speechlm.serve): replicas behind an alternating client answer alike, a
client that hangs up frees its slot, and SIGTERM drains the requests in flight and refuses new ones.
The second server is this file's own: the SIGTERM test stops it."""

from __future__ import annotations

import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

from serve_helpers import KEY, LIMITS, Server, transcribe


@pytest.fixture(scope="module")
def replica(twin, tmp_path_factory):
    """A second server of the same model: one segment per batch and one request at a time, so that a
    long request stays in flight for seconds (the disconnect and drain tests)."""
    s = Server(
        twin,
        tmp_path_factory.mktemp("logs") / "replica.log",
        "--max-batch",
        "1",
        "--max-concurrent",
        "1",
        "--served-model-name",
        "twin",
        *LIMITS,
    )
    yield s
    s.stop()
    assert KEY not in s.log.read_text()


# ---------------------------------------------------------------------------- replicas, hang-ups, SIGTERM
def test_two_replicas_behind_an_alternating_client_answer_alike(server, replica, clips, reference):
    paths, _ = clips
    before = [s.health()["requests"]["ok"] for s in (server, replica)]
    clients = [server.client(), replica.client()]
    got = [transcribe(clients[i % 2], p) for i, p in enumerate(paths)]
    assert got == [reference[p.name] for p in paths]
    after = [s.health()["requests"]["ok"] for s in (server, replica)]
    assert [a - b for a, b in zip(after, before)] == [len(paths) // 2, len(paths) // 2]


def _raw_request(url: str, path: Path) -> socket.socket:
    """A transcription request sent whole on a raw socket, its answer never read."""
    req = httpx.Request(
        "POST",
        url + "/v1/audio/transcriptions",
        files={"file": (path.name, path.read_bytes())},
        data={"model": "twin"},
        headers={"authorization": f"Bearer {KEY}"},
    )
    body = req.read()
    head = "POST /v1/audio/transcriptions HTTP/1.1\r\nhost: 127.0.0.1\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in req.headers.items() if k.lower() != "host"
    )
    sock = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))
    sock.sendall(head.encode() + b"\r\n" + body)
    return sock


def _wait(cond, timeout: float, what: str):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, what
        time.sleep(0.02)


def test_a_client_that_hangs_up_frees_its_slot(replica, clips, reference):
    paths, recording = clips
    before = replica.health()
    sock = _raw_request(replica.url, recording)
    _wait(lambda: replica.health()["batcher"]["segments_waiting"] > 5, 30, "the recording never queued")
    sock.close()
    _wait(lambda: replica.health()["requests_in_flight"] == 0, 5, "the slot was not freed")
    h = replica.health()
    assert h["requests"]["disconnected"] == before["requests"]["disconnected"] + 1
    assert h["batcher"]["segments_cancelled"] > before["batcher"]["segments_cancelled"]
    assert h["batcher"]["segments_waiting"] == 0
    # a client that hangs up mid-upload, too
    sock = socket.create_connection(("127.0.0.1", replica.port))
    sock.sendall(
        b"POST /v1/audio/transcriptions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + KEY.encode() + b"\r\n"
        b"content-type: multipart/form-data; boundary=abc\r\ncontent-length: 100000\r\n\r\n--abc\r\n"
    )
    _wait(lambda: replica.health()["requests_reading"] == 1, 10, "the upload never started")
    sock.close()
    _wait(lambda: replica.health()["requests_reading"] == 0, 5, "the upload was not dropped")
    assert transcribe(replica.client(), paths[1]) == reference[paths[1].name]  # one slot: it is free


def test_sigterm_drains_requests_in_flight_and_refuses_new_ones(replica, clips, reference):
    paths, recording = clips
    client = replica.client()
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("text", transcribe(client, recording)))
    t.start()
    _wait(lambda: replica.health()["batcher"]["segments_waiting"] > 5, 30, "the recording never queued")
    with pytest.raises(openai.APIStatusError) as e:  # one request at a time (--max-concurrent 1)
        transcribe(client, paths[0])
    assert e.value.status_code == 503 and e.value.body["code"] == "server_busy"
    assert e.value.response.headers["retry-after"] == "1"
    replica.proc.send_signal(signal.SIGTERM)
    _wait(lambda: httpx.get(replica.url + "/health").status_code == 503, 10, "health never said draining")
    with pytest.raises(openai.APIStatusError) as e:
        transcribe(client, paths[0])
    assert e.value.status_code == 503 and e.value.body["code"] == "shutting_down"
    t.join(60)
    assert result["text"] == reference[recording.name]  # the request in flight finished
    assert replica.proc.wait(30) == 0
    with pytest.raises(httpx.TransportError):
        httpx.get(replica.url + "/health", timeout=2)
