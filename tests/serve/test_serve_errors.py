"""What bad requests get from the server (speechlm.serve): every bad input a 4xx in OpenAI's error
shape with the server still serving, the openai client's exceptions, the API key enforced and never
logged; and a soak of good and bad requests mixed (slow)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import openai
import pytest

from serve_helpers import ERROR_KEYS, KEY, SR, flac, transcribe, wav


# ---------------------------------------------------------------------------- what bad requests get
def _truncated_body(model: str = "twin") -> tuple[bytes, dict]:
    req = httpx.Request("POST", "http://x/", files={"file": ("a.wav", wav(np.zeros(SR, np.float32)))}, data={})
    body = req.read()
    cut = body[: len(body) - 100]
    return cut, {"content-type": req.headers["content-type"], "content-length": str(len(cut))}


GRAIN = "timestamp_granularities[]"
# (name, request kwargs for httpx's post: files / data / content / headers, status, code, param)
BAD = [
    ("not audio", {"files": {"file": ("notes.txt", b"these are not audio samples")}}, 400, "invalid_audio", "file"),
    ("empty file", {"files": {"file": ("a.wav", b"")}}, 400, "empty_file", "file"),
    ("zero samples", {"files": {"file": ("a.wav", wav(np.zeros(0, np.float32)))}}, 400, "invalid_audio", "file"),
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
        {"files": {"file": ("long.flac", flac(np.zeros(200 * SR, np.float32)))}},
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
    files = case.get("files", {"file": ("a.wav", wav(np.zeros(SR, np.float32)))})
    return httpx.post(url, data=data, files=files, headers=headers, timeout=60)


@pytest.mark.parametrize("name,case,status,code,param", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_4xx_in_openais_shape(server, clips, reference, name, case, status, code, param):
    r = bad_request(server.url + "/v1/audio/transcriptions", case)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == ERROR_KEYS and err["type"] == "invalid_request_error" and err["code"] == code
    assert err["param"] == param and len(err["message"]) > 10
    paths, _ = clips
    assert transcribe(server.client(), paths[0]) == reference[paths[0].name]  # and it serves on


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
            return transcribe(client, what) == reference[what.name], None
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
