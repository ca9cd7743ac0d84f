"""The server fuzzed (issue 36, item 7; slow): Schemathesis against its OpenAPI schema, and a generated
audio corpus (tests/serve/audio_corpus.py) sent alone and mixed into batches with good requests. No
input may get a 5xx, and a good request mixed with them gets its text. The counts go to the test's
output (docs/reliability.md records them)."""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from audio_corpus import corpus
from serve_helpers import ERROR_KEYS, KEY

AUTH = {"authorization": f"Bearer {KEY}"}
URL = "/v1/audio/transcriptions"

pytestmark = pytest.mark.slow


def test_schemathesis_finds_no_server_error(server):
    """Every operation of /openapi.json, with Schemathesis' generated requests (bounded examples)."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings

    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    counts = Counter()
    for result in schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case):
            response = case.call(headers=AUTH, timeout=120)
            counts[f"{case.operation.label} {response.status_code // 100}xx"] += 1
            assert response.status_code < 500, (case.as_curl_command(), response.text[:300])
            if response.status_code >= 400:
                assert set(response.json()["error"]) == ERROR_KEYS

        check()
    print("schemathesis:", json.dumps(dict(sorted(counts.items()))))
    assert sum(counts.values()) >= 60 and not any(k.endswith("5xx") for k in counts)
    assert server.health()["batcher"]["alive"]


def _send(url: str, data: bytes) -> httpx.Response:
    files = {"file": ("upload", data)}
    return httpx.post(
        url + URL, files=files, data={"model": "twin", "response_format": "text"}, headers=AUTH, timeout=300
    )


def test_the_audio_corpus_gets_no_5xx_alone_or_mixed_with_good_requests(server, clips, reference):
    paths, _ = clips
    files = corpus()
    with ThreadPoolExecutor(4) as pool:  # each alone (4 at a time)
        alone = list(pool.map(lambda f: _send(server.url, f[2]), files))
    # then mixed: every 3 corpus files beside 3 good clips, sent at once into the same batches
    good = [(p.name, p.read_bytes()) for p in paths]
    mixed_plan = []
    for i in range(0, len(files), 3):
        mixed_plan += [("bad", f) for f in files[i : i + 3]]
        mixed_plan += [("good", good[(i + k) % len(good)]) for k in range(3)]
    with ThreadPoolExecutor(6) as pool:
        mixed = list(pool.map(lambda p: _send(server.url, p[1][2] if p[0] == "bad" else p[1][1]), mixed_plan))

    table, server_errors = Counter(), []
    for (cls, name, _), r in zip(files, alone):
        table[(cls, f"{r.status_code // 100}xx")] += 1
        if r.status_code >= 500:
            server_errors.append(("alone", name, r.status_code))
        elif r.status_code >= 400:
            assert set(r.json()["error"]) == ERROR_KEYS, (name, r.text)
    for (kind, what), r in zip(mixed_plan, mixed):
        if kind == "good":  # whatever its batch mates were
            assert r.status_code == 200 and r.text.strip() == reference[what[0]], (what[0], r.status_code, r.text)
        elif r.status_code >= 500:
            server_errors.append(("mixed", what[1], r.status_code))
    by_class = {}
    for (cls, outcome), n in sorted(table.items()):
        by_class.setdefault(cls, {})[outcome] = n
    print("corpus:", len(files), "inputs;", json.dumps(by_class))
    good_sent = sum(k == "good" for k, _ in mixed_plan)
    print(
        f"mixed: {len(mixed_plan) - good_sent} corpus files beside {good_sent} good requests, every good one its text"
    )
    h = server.health()
    assert h["batcher"]["alive"]
    assert not server_errors, server_errors
