"""The transcription endpoint's window priority and window limit (vllm_plugin/speechlm_vllm/server.py),
without vLLM: the wrappers are installed on a stand-in for vLLM's `SpeechToTextBaseServing` whose
`_create_speech_to_text` submits one engine request per window and reads them concurrently, as vLLM's
does, to an engine client that records what it gets. Under `--scheduling-policy priority` vLLM takes
lower priorities first; tests/vllm_plugin/test_vllm_serve.py checks that under `vllm serve`."""

import asyncio

import pytest

from speechlm_vllm import server


class Engine:
    errored = False

    def __init__(self):
        self.calls: list[tuple[str, int | None]] = []
        self.in_flight: dict[str, int] = {}  # per request: windows in the engine now
        self.most: dict[str, int] = {}  # per request: the most at once
        self.started: list[str] = []

    async def generate(self, prompt, params, request_id, **kwargs):
        self.calls.append((request_id, kwargs.get("priority")))
        name = request_id.rsplit("-", 1)[0]
        self.started.append(request_id)
        self.in_flight[name] = self.in_flight.get(name, 0) + 1
        self.most[name] = max(self.most.get(name, 0), self.in_flight[name])
        try:
            for _ in range(3):  # three outputs, the engine's steps between them
                await asyncio.sleep(0)
                yield request_id
        finally:
            self.in_flight[name] -= 1


class SpeechLMModel:
    @classmethod
    def speechlm_windows(cls, model_config, wave):
        return [wave]


class OtherModel:
    pass


def serving(model_cls):
    class Serving:
        async def _create_speech_to_text(self, request_id: str, windows: int, **extra):
            gens = []
            for i in range(windows):
                await asyncio.sleep(0)  # other requests' submissions interleave here
                gens.append(self.engine_client.generate(None, None, f"{request_id}-{i}", **extra))

            async def last(gen):
                return [out async for out in gen][-1]

            return await asyncio.gather(*(last(g) for g in gens))  # started in order, read concurrently

        def _decode_and_chunk_speech(self, audio_data):
            return [audio_data], 1.0

    Serving.model_cls = model_cls
    server._install_cut(Serving)
    server._install_priority(Serving)
    s = Serving()
    s.engine_client = Engine()
    return s


def run(s, *requests, **extra):
    async def go():
        return await asyncio.gather(*(s._create_speech_to_text(r, n, **extra) for r, n in requests))

    return asyncio.run(go())


def test_each_requests_windows_get_their_index_as_priority(monkeypatch):
    monkeypatch.delenv(server.WINDOWS_ENV, raising=False)
    s = serving(SpeechLMModel)
    got = run(s, ("long", 5), ("short", 1), ("mid", 3))
    assert got == [[f"long-{i}" for i in range(5)], ["short-0"], [f"mid-{i}" for i in range(3)]]
    assert dict(s.engine_client.calls) == {
        **{f"long-{i}": i for i in range(5)},
        "short-0": 0,
        **{f"mid-{i}": i for i in range(3)},
    }
    assert s.engine_client.most["long"] == 5  # no limit: all at once
    # a second request starts from 0 again, and the client is wrapped once
    run(s, ("again", 2))
    assert s.engine_client.calls[-2:] == [("again-0", 0), ("again-1", 1)]
    assert isinstance(s.engine_client, server.WindowPriority)
    assert not isinstance(s.engine_client._client, server.WindowPriority)
    assert s.engine_client.errored is False  # everything else is the engine client's own


def test_windows_in_flight_limits_each_request_and_keeps_their_order(monkeypatch):
    monkeypatch.setenv(server.WINDOWS_ENV, "2")
    s = serving(SpeechLMModel)
    got = run(s, ("long", 7), ("other", 5), ("short", 1))
    assert got == [[f"long-{i}" for i in range(7)], [f"other-{i}" for i in range(5)], ["short-0"]]
    assert s.engine_client.most == {"long": 2, "other": 2, "short": 1}
    assert [r for r in s.engine_client.started if r.startswith("long")] == [f"long-{i}" for i in range(7)]
    # the short request is not held behind the long one's windows: it starts before the long one ends
    assert s.engine_client.started.index("short-0") < s.engine_client.started.index("long-6")
    assert dict(s.engine_client.calls)["long-6"] == 6


def test_a_cancelled_request_leaves_its_held_windows_unsubmitted(monkeypatch):
    monkeypatch.setenv(server.WINDOWS_ENV, "1")
    s = serving(SpeechLMModel)

    async def go():
        task = asyncio.ensure_future(s._create_speech_to_text("gone", 6))
        while not s.engine_client.started:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert 1 <= len(s.engine_client.started) < 6
    assert s.engine_client.in_flight["gone"] == 0  # the one submitted was closed


@pytest.mark.parametrize("value", ["-1", "two", "1.5"])
def test_a_bad_windows_in_flight_is_an_error_naming_it(monkeypatch, value):
    monkeypatch.setenv(server.WINDOWS_ENV, value)
    with pytest.raises(ValueError, match=server.WINDOWS_ENV):
        serving(SpeechLMModel)


def test_a_given_priority_and_calls_outside_a_transcription_are_left_alone(monkeypatch):
    monkeypatch.delenv(server.WINDOWS_ENV, raising=False)
    s = serving(SpeechLMModel)
    run(s, ("given", 2), priority=7)

    async def outside():  # e.g. the realtime endpoint's own submissions
        return [out async for out in s.engine_client.generate(None, None, "outside-0")]

    assert asyncio.run(outside()) == ["outside-0"] * 3
    assert s.engine_client.calls == [("given-0", 7), ("given-1", 7), ("outside-0", None)]


def test_other_models_keep_vllms_endpoint(monkeypatch):
    monkeypatch.setenv(server.WINDOWS_ENV, "1")
    s = serving(OtherModel)
    run(s, ("x", 3))
    assert s.engine_client.calls == [("x-0", None), ("x-1", None), ("x-2", None)]
    assert s.engine_client.most["x"] == 3
    assert not isinstance(s.engine_client, server.WindowPriority)
    assert s._decode_and_chunk_speech("wave") == (["wave"], 1.0)


def test_installing_twice_wraps_once(monkeypatch):
    monkeypatch.delenv(server.WINDOWS_ENV, raising=False)
    s = serving(SpeechLMModel)
    before = type(s)._create_speech_to_text
    server._install_priority(type(s))
    server._install_cut(type(s))
    assert type(s)._create_speech_to_text is before
    run(s, ("x", 2))
    assert s.engine_client.calls == [("x-0", 0), ("x-1", 1)]
