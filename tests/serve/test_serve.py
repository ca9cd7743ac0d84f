"""The OpenAI-compatible server (speechlm.serve), started in a subprocess on 127.0.0.1 and spoken to
with the official `openai` client: the texts speechlm.transcribe gives, for clips and a long-form
recording, under concurrent load; subtitles that subtitle libraries read; every bad input a 4xx in
OpenAI's error shape with the server still serving; the API key; a client that hangs up; two replicas;
SIGTERM's drain. The batcher's scheduling is tested alone, with a transcriber that names its input."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
import srt
import torch
import webvtt

from model_helpers import tiny_config
from paths import REPO
from speechlm import text
from speechlm.serve.batcher import Batcher
from tests.infra.daemons import free_port

KEY = "test-key-7f3a9c"  # what the servers under test require; must never reach their logs
SR = 16000
ERROR_KEYS = {"message", "type", "param", "code"}


# ---------------------------------------------------------------------------- the batcher alone
def _namer(batches: list, delay: float = 0.0):
    """A transcriber whose text for a segment is its length, recording each batch's lengths."""

    def transcribe(waves, words=False):
        batches.append([len(w) for w in waves])
        time.sleep(delay)
        return [str(len(w)) for w in waves]

    return transcribe


def test_batcher_returns_each_requests_texts_in_order_and_sorts_each_batch():
    batches = []
    b = Batcher(_namer(batches), max_batch=4, max_wait=0.05)
    b.start()
    try:
        jobs = [b.submit([np.zeros(n) for n in lengths]) for lengths in ([5, 9, 7], [3], [8, 2, 6, 4, 1])]
        assert [j.future.result(10) for j in jobs] == [["5", "9", "7"], ["3"], ["8", "2", "6", "4", "1"]]
        assert b.submit([]).future.result(1) == []
    finally:
        b.stop(5)
    assert all(batch == sorted(batch, reverse=True) and len(batch) <= 4 for batch in batches)
    assert sum(map(len, batches)) == 9 and b.counts["largest_batch"] == 4  # gathered within max_wait


def test_batcher_lets_a_short_request_into_the_next_batch_past_a_long_ones_queue():
    batches = []
    b = Batcher(_namer(batches, delay=0.1), max_batch=8, max_wait=0.0, max_per_request=2)
    b.start()
    try:
        long = b.submit([np.zeros(1000 + i) for i in range(40)])  # twenty batches' worth
        while not batches:
            time.sleep(0.005)
        short = b.submit([np.zeros(7), np.zeros(5)])
        assert short.future.result(10) == ["7", "5"]
        assert not long.future.done()  # the short one did not wait for the long one's queue
        assert len(long.future.result(20)) == 40
    finally:
        b.stop(5)
    assert batches[0] == [1039, 1038]  # one request's segments, longest first, at most max_per_request
    assert batches[1] == [1037, 1036, 7, 5]  # the batch after the one running when the short one came
    assert all(len(x) == 2 for x in batches[2:])


def test_batcher_serves_the_fewest_waiting_first_and_ages_the_rest():
    from speechlm.serve import batcher as mod

    batches = []
    b = Batcher(_namer(batches), max_batch=3, max_wait=0.2, max_per_request=3)
    big = [np.zeros(100 + i) for i in range(6)]
    jobs = [b.submit(big), b.submit([np.zeros(50), np.zeros(40)]), b.submit([np.zeros(9)])]  # before the worker
    b.start()
    try:
        [j.future.result(5) for j in jobs]
    finally:
        b.stop(5)
    # round-robin by fewest waiting: the 1-segment job, the 2-segment one, the 6-segment one, ...
    assert batches[0] == [105, 50, 9] and batches[1] == [104, 103, 40]
    old = mod.AGING_SECONDS
    try:
        mod.AGING_SECONDS, batches[:] = 0.0, []  # everyone has waited long enough: the oldest go first
        b = Batcher(_namer(batches), max_batch=1, max_wait=0.2)
        jobs = [b.submit(big), b.submit([np.zeros(9)])]
        b.start()
        [j.future.result(5) for j in jobs]
        b.stop(5)
    finally:
        mod.AGING_SECONDS = old
    assert batches[0] == [105]  # not the 1-segment job that came after it


def test_batcher_cancel_drops_waiting_segments_and_a_failed_batch_fails_only_its_requests():
    batches, calls = [], []

    def flaky(waves, words=False):
        calls.append(len(waves))
        if any(len(w) == 13 for w in waves):
            raise RuntimeError("boom")
        return _namer(batches, delay=0.05)(waves, words)

    b = Batcher(flaky, max_batch=2, max_wait=0.0)
    b.start()
    try:
        long = b.submit([np.zeros(100) for _ in range(20)])
        while not batches:
            time.sleep(0.005)
        b.cancel(long)
        assert long.future.cancelled()
        bad = b.submit([np.zeros(13)])
        with pytest.raises(RuntimeError, match="boom"):
            bad.future.result(5)
        assert b.submit([np.zeros(5)]).future.result(5) == ["5"]  # the worker serves on
    finally:
        b.stop(5)
    assert sum(len(x) for x in batches) <= 6 and b.counts["segments_cancelled"] >= 14
    assert b.counts["failed_batches"] == 1 and b.stats()["segments_waiting"] == 0


# ---------------------------------------------------------------------------- a model, clips, servers
@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    """A tiny Granite + Qwen3 twin in fp32 whose transcripts differ from clip to clip (a trained-looking
    adapter, end-of-turn held back: speechlm's export test does the same), saved as a model folder."""
    from speechlm.model import save_pretrained
    from speechlm.model.build import build_model

    torch.manual_seed(0)
    cfg = tiny_config(decoder="tiny/qwen3", encoder="tiny/granite_speech5", bf16=False)
    # fp32, as the demo model: bf16's batch-shaped rounding flips near ties (docs/design.md, "Serving")
    cfg.model.model_dtype = "float32"
    m = build_model(cfg)
    with torch.no_grad():
        for n, p in m.decoder.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
        m._base_lm().get_output_embeddings().weight[text.end_of_turn_id(m.tokenizer)] = 0
    m.cfg.max_new_tokens = 10
    out = tmp_path_factory.mktemp("twin") / "twin"
    save_pretrained(m, out)
    return out


def _flac(wave: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, wave, SR, format="FLAC")
    return buf.getvalue()


@pytest.fixture(scope="module")
def clips(synthetic_shards, tmp_path_factory):
    """The synthetic set's 8 test clips as FLAC files, and a ~75 s recording of them three times over
    with pauses between sentences (cut by the long-form segments)."""
    from speechlm.inference import dataset_clips

    folder = tmp_path_factory.mktemp("clips")
    _, data = dataset_clips(str(synthetic_shards), split="test")
    waves = [np.asarray(w, np.float32) for _, w, _ in data]
    paths = []
    for i, w in enumerate(waves):
        paths.append(folder / f"clip{i}.flac")
        paths[-1].write_bytes(_flac(w))
    rng = np.random.default_rng(0)
    parts = []
    for _ in range(3):
        for w in waves:
            parts += [w, np.zeros(int(SR * rng.uniform(0.8, 1.5)), np.float32)]
    recording = folder / "recording.flac"
    recording.write_bytes(_flac(np.concatenate(parts)))
    return paths, recording


@pytest.fixture(scope="module")
def reference(twin, clips):
    """speechlm.transcribe's texts for every clip and the recording: all in one batched job, and
    each clip alone (a clip's text must not depend on its batch mates, or no server could match it)."""
    from speechlm.inference import transcribe_files
    from speechlm.model import from_pretrained

    paths, recording = clips
    model = from_pretrained(twin)
    together = transcribe_files(model, [str(p) for p in [*paths, recording]])
    alone = [transcribe_files(model, [str(p)])[0] for p in paths]
    assert together[:-1] == alone
    assert len(set(alone)) >= 4 and all(alone)  # texts that tell the clips apart
    return dict(zip([p.name for p in [*paths, recording]], together))


class Server:
    def __init__(self, model: Path, log: Path, *flags: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            "SPEECHLM_API_KEY": KEY,
        }
        cmd = [sys.executable, "-m", "speechlm.serve", str(model), "--port", str(self.port), *flags]
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        deadline = time.time() + 180
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise AssertionError(f"server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

    def health(self) -> dict:
        return httpx.get(self.url + "/health", timeout=5).json()

    def client(self, key: str | None = KEY) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key or "none", max_retries=0, timeout=120)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


LIMITS = ["--max-upload-mb", "3", "--max-seconds", "150"]


@pytest.fixture(scope="module")
def server(twin, tmp_path_factory):
    s = Server(twin, tmp_path_factory.mktemp("logs") / "server.log", "--max-batch", "8", "--max-wait-ms", "20", *LIMITS)
    yield s
    s.stop()
    assert KEY not in s.log.read_text()


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


def _transcribe(client: openai.OpenAI, path: Path, fmt: str = "text", **kw):
    with open(path, "rb") as f:
        out = client.audio.transcriptions.create(model="twin", file=f, response_format=fmt, **kw)
    return out if isinstance(out, str) else out.text


# ---------------------------------------------------------------------------- what good requests get
def test_concurrent_requests_get_speechlm_transcribes_texts(server, clips, reference):
    paths, recording = clips
    client = server.client()
    files = [recording, *paths, *paths]  # the long one first: the clips batch beside its segments
    fmts = ["text", "json"] * len(files)
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda a: _transcribe(client, *a), zip(files, fmts)))
    assert got == [reference[p.name] for p in files]
    stats = server.health()["batcher"]
    assert stats["largest_batch"] > 1 and stats["segments"] > len(files)  # shared batches, the recording cut


def test_subtitles_and_verbose_json_carry_the_long_form_segments(server, clips, reference):
    _, recording = clips
    client = server.client()
    verbose = client.audio.transcriptions.create(
        model="twin",
        file=recording.read_bytes(),
        response_format="verbose_json",
        timestamp_granularities=["segment"],
        language="en",
        prompt="ignored: the model's instruction is fixed",
        temperature=0,
    )
    duration = sf.info(recording).duration
    assert verbose.text == reference[recording.name] and abs(verbose.duration - duration) < 0.01
    segs = verbose.segments
    assert len(segs) >= 20  # 24 sentences, cut in their pauses
    assert all(0 <= s.start < s.end <= duration + 1e-3 for s in segs)
    assert all(a.end <= b.start for a, b in zip(segs, segs[1:]))  # in order, silence between them left out
    assert " ".join(s.text for s in segs) == verbose.text

    cues = list(srt.parse(_transcribe(client, recording, "srt")))
    assert [c.content for c in cues] == [s.text for s in segs]
    assert [round(c.start.total_seconds(), 3) for c in cues] == [s.start for s in segs]
    assert [round(c.end.total_seconds(), 3) for c in cues] == [s.end for s in segs]
    vtt = webvtt.from_string(_transcribe(client, recording, "vtt"))
    assert [c.text for c in vtt] == [s.text for s in segs]
    assert [c.start for c in vtt] == [srt.timedelta_to_srt_timestamp(c.start).replace(",", ".") for c in cues]


def test_verbose_json_has_word_timestamps_when_asked(server, clips, reference):
    _, recording = clips
    verbose = server.client().audio.transcriptions.create(
        model="twin", file=recording.read_bytes(), response_format="verbose_json", timestamp_granularities=["word"]
    )
    words = verbose.words
    assert verbose.text == reference[recording.name]
    assert [w.word for w in words] == verbose.text.split()  # every word of the text, in order
    placed = [w for w in words if w.start is not None]
    assert placed and [w.start for w in placed] == sorted(w.start for w in placed)
    assert all(0 <= w.start <= w.end <= verbose.duration + 1e-3 for w in placed)


def test_models_and_health(server):
    models = server.client().models.list()
    assert [m.id for m in models.data] == ["twin"]
    h = server.health()
    assert h["status"] == "ok" and h["model"] == "twin" and h["requests_in_flight"] == 0


# ---------------------------------------------------------------------------- what bad requests get
def _wav(wave: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, wave, SR, format="WAV")
    return buf.getvalue()


def _truncated_body(model: str = "twin") -> tuple[bytes, dict]:
    req = httpx.Request("POST", "http://x/", files={"file": ("a.wav", _wav(np.zeros(SR, np.float32)))}, data={})
    body = req.read()
    cut = body[: len(body) - 100]
    return cut, {"content-type": req.headers["content-type"], "content-length": str(len(cut))}


GRAIN = "timestamp_granularities[]"
# (name, request kwargs for httpx's post: files / data / content / headers, status, code, param)
BAD = [
    ("not audio", {"files": {"file": ("notes.txt", b"these are not audio samples")}}, 400, "invalid_audio", "file"),
    ("empty file", {"files": {"file": ("a.wav", b"")}}, 400, "empty_file", "file"),
    ("zero samples", {"files": {"file": ("a.wav", _wav(np.zeros(0, np.float32)))}}, 400, "invalid_audio", "file"),
    ("unknown model", {"model": "whisper-1"}, 404, "model_not_found", "model"),
    ("missing file", {"files": None}, 400, "missing", "file"),
    ("file as text", {"files": None, "data": {"file": "abc"}}, 400, "invalid_value", "file"),
    ("missing model", {"model": None}, 400, "missing", "model"),
    ("bad response_format", {"data": {"response_format": "xml"}}, 400, "unsupported_value", "response_format"),
    ("french", {"data": {"language": "fr"}}, 400, "unsupported_language", "language"),
    ("temperature", {"data": {"temperature": "0.4"}}, 400, "unsupported_value", "temperature"),
    (
        "word timestamps outside verbose_json",
        {"data": {"timestamp_granularities[]": "word"}},
        400,
        "invalid_value",
        "timestamp_granularities[]",
    ),
    ("truncated upload", {"truncated": True}, 400, "truncated_upload", "file"),
    ("too large", {"files": {"file": ("big.wav", b"\0" * (4 * 2**20))}}, 413, "file_too_large", "file"),
    (
        "too long",
        {"files": {"file": ("long.flac", _flac(np.zeros(200 * SR, np.float32)))}},
        400,
        "audio_too_long",
        "file",
    ),
]


def bad_request(url: str, case: dict, key: str = KEY) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    if case.get("truncated"):
        body, h = _truncated_body()
        return httpx.post(url, content=body, headers={**headers, **h}, timeout=60)
    data = {"model": case.get("model", "twin"), **case.get("data", {})}
    data = {k: v for k, v in data.items() if v is not None}
    files = case.get("files", {"file": ("a.wav", _wav(np.zeros(SR, np.float32)))})
    return httpx.post(url, data=data, files=files, headers=headers, timeout=60)


@pytest.mark.parametrize("name,case,status,code,param", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_4xx_in_openais_shape(server, clips, reference, name, case, status, code, param):
    r = bad_request(server.url + "/v1/audio/transcriptions", case)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == ERROR_KEYS and err["type"] == "invalid_request_error" and err["code"] == code
    assert err["param"] == param and len(err["message"]) > 10
    paths, _ = clips
    assert _transcribe(server.client(), paths[0]) == reference[paths[0].name]  # and it serves on


def test_the_openai_client_raises_the_servers_errors(server, clips):
    client = server.client()
    with pytest.raises(openai.NotFoundError) as e:
        client.audio.transcriptions.create(model="whisper-1", file=clips[0][0].read_bytes())
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:  # words come in verbose_json only, as in OpenAI's API
        client.audio.transcriptions.create(
            model="twin", file=clips[0][0].read_bytes(), response_format="json", timestamp_granularities=["word"]
        )
    assert "verbose_json" in e.value.body["message"] and e.value.body["param"] == "timestamp_granularities[]"


def test_the_api_key_is_enforced_and_never_logged(server, clips):
    url = server.url + "/v1/audio/transcriptions"
    for key, code in ((None, "missing_api_key"), ("wrong-key", "invalid_api_key")):
        with pytest.raises(openai.AuthenticationError) as e:
            server.client(key).audio.transcriptions.create(model="twin", file=clips[0][0].read_bytes())
        assert e.value.status_code == 401 and e.value.body["code"] == (code if key else "invalid_api_key")
        r = httpx.get(server.url + "/v1/models", headers={"authorization": f"Bearer {key}"} if key else {})
        assert r.status_code == 401 and set(r.json()["error"]) == ERROR_KEYS
    r = httpx.post(url, files={"file": ("a.wav", b"x")}, data={"model": "twin"})  # no header at all
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    assert httpx.get(server.url + "/health").status_code == 200  # a load balancer's probe needs no key
    assert KEY not in server.log.read_text() and "wrong-key" not in server.log.read_text()


# ---------------------------------------------------------------------------- replicas, hang-ups, SIGTERM
def test_two_replicas_behind_an_alternating_client_answer_alike(server, replica, clips, reference):
    paths, _ = clips
    before = [s.health()["requests"]["ok"] for s in (server, replica)]
    clients = [server.client(), replica.client()]
    got = [_transcribe(clients[i % 2], p) for i, p in enumerate(paths)]
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
    _wait(lambda: replica.health()["requests_in_flight"] == 1, 10, "the upload never started")
    sock.close()
    _wait(lambda: replica.health()["requests_in_flight"] == 0, 5, "the slot was not freed")
    assert _transcribe(replica.client(), paths[1]) == reference[paths[1].name]  # one slot: it is free


def test_sigterm_drains_requests_in_flight_and_refuses_new_ones(replica, clips, reference):
    paths, recording = clips
    client = replica.client()
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("text", _transcribe(client, recording)))
    t.start()
    _wait(lambda: replica.health()["batcher"]["segments_waiting"] > 5, 30, "the recording never queued")
    with pytest.raises(openai.APIStatusError) as e:  # one request at a time (--max-concurrent 1)
        _transcribe(client, paths[0])
    assert e.value.status_code == 503 and e.value.body["code"] == "server_busy"
    assert e.value.response.headers["retry-after"] == "1"
    replica.proc.send_signal(signal.SIGTERM)
    _wait(lambda: httpx.get(replica.url + "/health").status_code == 503, 10, "health never said draining")
    with pytest.raises(openai.APIStatusError) as e:
        _transcribe(client, paths[0])
    assert e.value.status_code == 503 and e.value.body["code"] == "shutting_down"
    t.join(60)
    assert result["text"] == reference[recording.name]  # the request in flight finished
    assert replica.proc.wait(30) == 0
    with pytest.raises(httpx.TransportError):
        httpx.get(replica.url + "/health", timeout=2)


def test_cli_checks_its_settings_before_loading_anything(twin, capsys):
    from speechlm.serve import main

    for flags, msg in (
        (["--max-batch", "0"], "--max-batch must be at least 1"),
        (["--max-upload-mb", "0"], "--max-upload-mb must be positive"),
        (["--threshold-db", "-1"], "--threshold-db must be positive"),
    ):
        with pytest.raises(SystemExit) as e:
            main([str(twin), *flags])
        assert e.value.code == 2 and msg in capsys.readouterr().err


# ---------------------------------------------------------------------------- soak
@pytest.mark.slow
def test_soak_mixed_good_and_bad_requests_loses_nothing(server, clips, reference):
    """100 requests, 8 at a time, a third of them bad: every good one gets speechlm's text, every bad
    one its 4xx, none a 5xx; bounded at 10 minutes."""
    paths, recording = clips
    url = server.url + "/v1/audio/transcriptions"
    plan = []
    for i in range(100):
        if i % 3 == 2:
            plan.append(("bad", BAD[(i // 3) % len(BAD)]))
        else:
            plan.append(("good", recording if i % 25 == 0 else paths[i % len(paths)]))
    client = server.client()

    def run(item):
        kind, what = item
        if kind == "good":
            return _transcribe(client, what) == reference[what.name], None
        r = bad_request(url, what[1])
        return r.status_code == what[2] and r.json()["error"]["code"] == what[3], r.status_code

    t0 = time.time()
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, plan))
    assert time.time() - t0 < 600
    assert all(ok for ok, _ in results), [p for p, (ok, _) in zip(plan, results) if not ok][:5]
    assert not any(status and status >= 500 for _, status in results)
    h = server.health()
    assert h["status"] == "ok" and h["requests"]["server_errors"] == 0


def test_help_shows_examples():
    from speechlm.serve.cli import build_parser

    text = build_parser().format_help()
    assert "examples:" in text and "curl" in text and "SPEECHLM_API_KEY" in text
