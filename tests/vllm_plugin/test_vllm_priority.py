"""The transcription endpoint's window priority (vllm_plugin/speechlm_vllm/server.py), without vLLM: the
wrapper is installed on a stand-in for vLLM's `SpeechToTextBaseServing` whose `_create_speech_to_text`
submits one engine request per window, as vLLM's does, to an engine client that records what it gets.
Under `--scheduling-policy priority` vLLM takes lower priorities first; tests/vllm_plugin/
test_vllm_serve.py checks that under `vllm serve`."""

import asyncio

from speechlm_vllm import server


class Engine:
    def __init__(self):
        self.calls: list[tuple[str, int | None]] = []

    def generate(self, prompt, params, request_id, **kwargs):
        self.calls.append((request_id, kwargs.get("priority")))
        return request_id

    errored = False


class SpeechLMModel:
    @classmethod
    def speechlm_windows(cls, model_config, wave):
        return [wave]


class OtherModel:
    pass


def serving(model_cls):
    class Serving:
        async def _create_speech_to_text(self, request_id: str, windows: int, **extra):
            out = []
            for i in range(windows):
                await asyncio.sleep(0)  # other requests' submissions interleave here
                out.append(self.engine_client.generate(None, None, f"{request_id}-{i}", **extra))
            return out

        def _decode_and_chunk_speech(self, audio_data):
            return [audio_data], 1.0

    Serving.model_cls = model_cls
    server._install_cut(Serving)
    server._install_priority(Serving)
    s = Serving()
    s.engine_client = Engine()
    return s


def test_each_requests_windows_get_their_index_as_priority():
    s = serving(SpeechLMModel)

    async def run():
        requests = (("long", 5), ("short", 1), ("mid", 3))
        return await asyncio.gather(*(s._create_speech_to_text(r, n) for r, n in requests))

    assert asyncio.run(run()) == [[f"long-{i}" for i in range(5)], ["short-0"], [f"mid-{i}" for i in range(3)]]
    got = dict(s.engine_client.calls)
    assert got == {**{f"long-{i}": i for i in range(5)}, "short-0": 0, **{f"mid-{i}": i for i in range(3)}}
    # a second request starts from 0 again, and the client is wrapped once
    asyncio.run(s._create_speech_to_text("again", 2))
    assert s.engine_client.calls[-2:] == [("again-0", 0), ("again-1", 1)]
    assert isinstance(s.engine_client, server.WindowPriority)
    assert not isinstance(s.engine_client._client, server.WindowPriority)
    assert s.engine_client.errored is False  # everything else is the engine client's own


def test_a_given_priority_and_calls_outside_a_transcription_are_left_alone():
    s = serving(SpeechLMModel)
    asyncio.run(s._create_speech_to_text("given", 2, priority=7))
    s.engine_client.generate(None, None, "outside")  # e.g. the realtime endpoint's own submissions
    assert s.engine_client.calls == [("given-0", 7), ("given-1", 7), ("outside", None)]


def test_other_models_keep_vllms_endpoint():
    s = serving(OtherModel)
    asyncio.run(s._create_speech_to_text("x", 2))
    assert s.engine_client.calls == [("x-0", None), ("x-1", None)]
    assert not isinstance(s.engine_client, server.WindowPriority)
    assert s._decode_and_chunk_speech("wave") == (["wave"], 1.0)


def test_installing_twice_wraps_once():
    s = serving(SpeechLMModel)
    before = type(s)._create_speech_to_text
    server._install_priority(type(s))
    server._install_cut(type(s))
    assert type(s)._create_speech_to_text is before
    asyncio.run(s._create_speech_to_text("x", 2))
    assert s.engine_client.calls == [("x-0", 0), ("x-1", 1)]
