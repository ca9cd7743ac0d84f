"""Live transcription on the server: a `Streamer` (speechlm.model.longform.streaming) whose decodes the
model worker runs, and `stream=true` on `POST /v1/audio/transcriptions` (server-sent events).

A stream's window decodes go to the batcher as one-segment jobs with the stream's committed words as
their prefix, so the worker batches them with every other stream's and request's segments (as
`feed_many` batches streams). The `Streamer` is the library's, unchanged: it calls
`QueuedModel.transcribe`, which waits for its job in a worker thread (`step`, under the server's own
limiter, so streams waiting on the model never starve the threads that decode uploads).

`stream=true`: the upload is read, decoded and checked as any request's is (errors before the first
byte are ordinary 4xx/5xx answers), then fed to a new stream in pieces of `PIECE_SECONDS` as fast as
it decodes, so the first words go out after the first sentence's decodes, not after the file's. The
events, as OpenAI's API sends them (`client.audio.transcriptions.create(..., stream=True)` yields
them): `transcript.text.delta` ({"delta"}: text appended; all deltas joined are the text) per commit,
then `transcript.text.done` ({"text": what the stream committed, "usage"}). A failure after the
first event is an `error` event ({"error": OpenAI's error object}) that ends the stream; a client that
hangs up cancels the stream's job in the queue; the server's shutdown deadline ends it with an
`error` event `shutting_down`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable

import anyio
import numpy as np
from anyio import to_thread
from fastapi.responses import StreamingResponse

from speechlm.inference import DEFAULT_STREAM_SETTINGS, SAMPLE_RATE, Streamer, StreamSettings
from speechlm.inference.live import PIECE_SECONDS  # an upload's pieces: a pipe's (the decodes fall as live)
from speechlm.serve.batcher import SegmentError, WorkerDead

log = logging.getLogger("speechlm.serve")


class StreamClosed(Exception):
    """The stream's client left, or the server is shutting down: its decodes are called off."""


class QueuedModel:
    """The model as a `Streamer` sees it (`transcribe`, `features`, `family`), its decodes run by the
    server's model worker. `close()` calls off the decode in progress and every later one."""

    def __init__(self, engine, batcher, request_id: str, task=None):
        self.family = engine.model.family
        self.task = task  # the request's language and task (speechlm.inference.Task); None: plain
        self.features = engine.model.features
        self._batcher = batcher
        self._request_id = request_id
        self._lock = threading.Lock()
        self._job = None
        self._closed = False

    def transcribe(self, waves, details=True, timestamps=True, prefixes=None) -> list[dict]:
        with self._lock:
            if self._closed:
                raise StreamClosed
            self._job = self._batcher.submit(
                list(waves),
                words=True,
                request_id=self._request_id,
                prefixes=prefixes or [""] * len(waves),
                task=self.task,
            )
            job = self._job
        try:
            return job.future.result()
        except Exception as e:
            if job.future.cancelled():
                raise StreamClosed from None
            raise e

    def close(self) -> None:
        with self._lock:
            self._closed = True
            job = self._job
        if job is not None:
            self._batcher.cancel(job)


async def step(fn, *args, limiter: anyio.CapacityLimiter):
    """`fn(*args)` (a stream's feed or finish, which may wait for the model) in a worker thread; a
    cancelled caller does not wait for it (its model's `close()` ends the wait)."""
    return await to_thread.run_sync(fn, *args, limiter=limiter, abandon_on_cancel=True)


def sse(event: dict) -> bytes:
    return f"data: {json.dumps(event)}\n\n".encode()


def error_event(status: int, message: str, code: str) -> dict:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"type": "error", "error": {"message": message, "type": kind, "param": None, "code": code}}


def failure(e: BaseException, rid: str) -> dict:
    """The `error` event of a stream's failure: the input's fault, the worker's end, or the server's."""
    if isinstance(e, SegmentError) and e.input_fault:
        return error_event(400, f"the model cannot transcribe this audio: {e}", "unusable_audio")
    if isinstance(e, WorkerDead):
        return error_event(503, "the server's model worker stopped; send the request again", "unhealthy")
    log.error("request %s: its stream failed", rid, exc_info=e)
    return error_event(500, f"internal server error on this request (id {rid}; see the server's log)", "internal_error")


async def file_events(
    wave: np.ndarray, model: QueuedModel, settings: StreamSettings, limiter, usage
) -> AsyncIterator[dict]:
    """The events of an uploaded recording streamed as it decodes (module docstring); `usage(samples,
    text)`: the done event's usage. Raises what a decode raised (the caller turns it into an event)."""
    stream = Streamer(model, settings)
    step_samples = int(PIECE_SECONDS * SAMPLE_RATE)
    for i in range(0, len(wave), step_samples):
        for e in await step(stream.feed, wave[i : i + step_samples], limiter=limiter):
            yield {"type": "transcript.text.delta", "delta": e.delta}
    for e in await step(stream.finish, limiter=limiter):
        if e.delta:
            yield {"type": "transcript.text.delta", "delta": e.delta}
    yield {"type": "transcript.text.done", "text": stream.text, "usage": usage(len(wave), stream.text)}


class _Held(StreamingResponse):
    """A streaming answer that runs `release` once it ends, however it ends (sent, failed, or the
    client gone before its first byte: then the body never starts, so its own `finally` would not run)."""

    def __init__(self, body, release: Callable[[], None], headers: dict):
        super().__init__(body, media_type="text/event-stream", headers={"Cache-Control": "no-cache", **headers})
        self._release = release

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def sse_response(
    wave: np.ndarray, engine, batcher, state, rid: str, release: Callable[[], None], task=None
) -> StreamingResponse:
    """`stream=true`'s answer for a decoded upload (module docstring); `release` frees its model slot;
    `task`: the request's pinned language (speechlm.inference.Task), asked of every decode."""
    model = QueuedModel(engine, batcher, rid, task)

    async def body():
        cut = asyncio.ensure_future(state.cut.wait())
        cut.add_done_callback(lambda _: model.close())  # the shutdown deadline calls the decodes off
        try:
            events = file_events(wave, model, DEFAULT_STREAM_SETTINGS, state.live_limiter, engine.usage)
            async for event in events:
                yield sse(event)
        except StreamClosed:
            if state.cut.is_set():
                msg = "the server shut down before this stream finished (--shutdown-timeout); send it again"
                yield sse(error_event(503, msg, "shutting_down"))
        except Exception as e:  # noqa: BLE001 -- the answer has begun: the error goes out as an event
            yield sse(failure(e, rid))
        finally:
            cut.cancel()
            model.close()

    return _Held(body(), release, {"x-request-id": rid})
