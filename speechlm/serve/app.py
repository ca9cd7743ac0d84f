"""The HTTP app: OpenAI's `POST /v1/audio/transcriptions`, `GET /v1/models`, and `GET /health`.

A request's body is read (`upload`: bounded in size and time) before it takes one of the
`--max-concurrent` model slots, so a slow or stalled upload holds none; its fields are checked one by
one, its audio decoded within the duration limit and cut as `speechlm transcribe` cuts a file
(`engine`), and its segments go to the model worker (`batcher`), which batches them with every other
request's; the texts come back in order and are joined as `transcribe` joins them. A segment that the
model refuses is a 400 for its own request only; a failure of the server's own is a 500 for that request,
logged with its request id (the `x-request-id` header of every transcription answer).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from speechlm import text
from speechlm.inference import Task, fitted
from speechlm.serve import errors, fields, formats, live, realtime
from speechlm.serve.batcher import Batcher, SegmentError, WorkerDead
from speechlm.serve.config import ServeConfig
from speechlm.serve.engine import SAMPLE_RATE, BadAudio, Engine, TooLong
from speechlm.serve.errors import APIError
from speechlm.serve.upload import read_form

log = logging.getLogger("speechlm.serve")


@dataclass
class ServerState:
    """What the server holds between requests: only counters and the shutdown flags (it is stateless)."""

    draining: bool = False
    reading: int = 0  # requests whose body is arriving (no model slot yet)
    in_flight: int = 0  # requests holding a model slot: decoding, queued or transcribed
    started: float = field(default_factory=time.time)
    stop_timeout: float = 30.0  # how long the lifespan's end waits for the batch in progress
    cut: asyncio.Event | None = None  # set at the shutdown deadline: whoever still waits answers 503
    loop: asyncio.AbstractEventLoop | None = None
    live_limiter: anyio.CapacityLimiter | None = None  # threads of live streams waiting on the model (live.py)
    counts: dict = field(
        default_factory=lambda: {"ok": 0, "client_errors": 0, "server_errors": 0, "busy": 0, "disconnected": 0}
    )

    def cut_short(self) -> None:
        """Answer every request still waiting with 503 `shutting_down` (callable from any thread)."""
        if self.loop is not None and self.cut is not None:
            self.loop.call_soon_threadsafe(self.cut.set)


def _check_key(cfg: ServeConfig):
    expected = cfg.api_key.encode() if cfg.api_key else None

    def check(request: Request) -> None:
        if expected is None:
            return
        auth = request.headers.get("authorization", "")
        scheme, _, key = auth.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise APIError(401, "missing API key: send the header 'Authorization: Bearer KEY'", "missing_api_key")
        if not hmac.compare_digest(key.strip().encode(), expected):
            raise APIError(401, "incorrect API key", "invalid_api_key")

    return check


async def _client_gone(receive) -> None:
    """Returns when the client hangs up (the body is read by now, so the next message is the hang-up)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def create_app(cfg: ServeConfig, engine: Engine, batcher: Batcher, names: list[str]) -> FastAPI:
    state = ServerState()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        state.loop, state.cut = asyncio.get_running_loop(), asyncio.Event()
        state.live_limiter = anyio.CapacityLimiter(cfg.max_concurrent)
        batcher.start()
        yield
        await run_in_threadpool(batcher.stop, state.stop_timeout)

    app = FastAPI(title="speechlm", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url="/openapi.json")
    app.state.serve = state
    errors.install(app)
    authorized = Depends(_check_key(cfg))

    @app.get("/health")
    async def health():
        status = "draining" if state.draining else "ok" if batcher.alive else "unhealthy"
        body = {
            "status": status,
            "model": names[0],
            "requests_reading": state.reading,
            "requests_in_flight": state.in_flight,
            "max_concurrent": cfg.max_concurrent,
            "uptime_seconds": round(time.time() - state.started, 1),
            "requests": dict(state.counts),
            "batcher": batcher.stats(),
        }
        return JSONResponse(body, status_code=200 if status == "ok" else 503)

    @app.get("/v1/models", dependencies=[authorized])
    async def models():
        data = [{"id": n, "object": "model", "created": int(state.started), "owned_by": "speechlm"} for n in names]
        return {"object": "list", "data": data}

    def answer(request: Request, translation: bool):
        return _answer(request, translation, (state, cfg, engine, batcher, names))

    @app.post("/v1/audio/transcriptions", dependencies=[authorized], openapi_extra=fields.openapi(names))
    async def transcriptions(request: Request):
        return await answer(request, translation=False)

    @app.post("/v1/audio/translations", dependencies=[authorized], openapi_extra=fields.openapi(names))
    async def translations(request: Request):
        """OpenAI's translations: the speech of any language the model serves, answered in English."""
        return await answer(request, translation=True)

    realtime.install(app, cfg, engine, batcher, names, state)  # WebSocket /v1/realtime (serve/realtime.py)
    return app


async def _answer(request: Request, translation: bool, ctx: tuple) -> Response:
    """A transcription or translation request's answer, with its request id (`ctx`: the app's state,
    settings, engine, batcher and served names)."""
    state, cfg, engine, batcher, names = ctx
    rid = uuid.uuid4().hex[:16]
    handle = lambda: _transcribe(request, rid, state, cfg, engine, batcher, names, translation)  # noqa: E731
    try:
        response = await _counted(state, handle)
    except APIError as e:
        e.headers = {**(e.headers or {}), "x-request-id": rid}
        raise
    response.headers["x-request-id"] = rid
    return response


def _busy(cfg: ServeConfig) -> APIError:
    return APIError(
        503,
        f"the server is at its limit of {cfg.max_concurrent} concurrent requests (--max-concurrent); retry",
        "server_busy",
        headers={"Retry-After": "1"},
    )


def _door(state: ServerState, batcher: Batcher) -> None:
    """Refused at once: while draining, or once the model worker has died (the process is exiting)."""
    if state.draining:
        raise APIError(503, "the server is shutting down; send the request to another replica", "shutting_down")
    if not batcher.alive:
        raise APIError(503, "the server's model worker has stopped; send the request to another replica", "unhealthy")


async def _counted(state: ServerState, handle) -> Response:
    """One request, counted by its outcome."""
    try:
        response = await handle()
        state.counts["ok"] += 1
        return response
    except APIError as e:
        state.counts["busy" if e.code == "server_busy" else "client_errors" if e.status < 500 else "server_errors"] += 1
        raise
    except ClientDisconnect:  # the client left: nobody to answer
        state.counts["disconnected"] += 1
        return Response(status_code=499)
    except Exception:
        state.counts["server_errors"] += 1
        raise


async def _read(request: Request, state: ServerState, cfg: ServeConfig, names: list[str], parse=fields.parse):
    """(the parsed fields, the file's bytes), read while holding an upload place, not a model slot: at
    most 2 x --max-concurrent bodies arrive at once, each within --read-timeout of its last bytes."""
    if state.in_flight >= cfg.max_concurrent or state.reading >= 2 * cfg.max_concurrent:
        raise _busy(cfg)  # full already: refuse before the upload is read
    state.reading += 1
    try:
        form = await read_form(request.receive, request.headers, cfg.max_upload_bytes, cfg.read_timeout, state.cut)
    finally:
        state.reading -= 1
    try:
        req = parse(form, names)
        data = await req.file.read()
    finally:
        await form.close()
    if not data:
        raise APIError(400, "the file is empty (0 bytes)", "empty_file", "file")
    return req, data


async def _transcribe(
    request, rid: str, state: ServerState, cfg: ServeConfig, engine, batcher, names, translation: bool = False
) -> Response:
    _door(state, batcher)
    parse = lambda form, names: fields.parse(form, names, engine.languages, translation)  # noqa: E731
    req, data = await _read(request, state, cfg, names, parse)
    task = "translate" if translation else "transcribe"
    # the language as the CLI asks it too (checked at parse; an English-only model's en is no language)
    asked = fitted(engine.model, Task(req.language, task, (req.prompt or "").strip() or None))
    req.language = asked.language
    req.task = asked if asked != Task() else None
    _door(state, batcher)
    if state.in_flight >= cfg.max_concurrent:
        raise _busy(cfg)
    state.in_flight += 1
    handed = False  # a stream's answer holds the slot until it ends (live.py)
    try:
        if req.stream:
            wave = await _decode(data, cfg, engine)
            del data
            response = live.sse_response(wave, engine, batcher, state, rid, lambda: _release(state), req.task)
            handed = True
            return response
        return await _run(request, rid, state, cfg, engine, batcher, req, data)
    finally:
        if not handed:
            state.in_flight -= 1


def _release(state: ServerState) -> None:
    state.in_flight -= 1


async def _decode(data: bytes, cfg: ServeConfig, engine):
    try:
        return await run_in_threadpool(engine.decode, data, cfg.max_seconds)
    except BadAudio as e:
        code = "audio_too_long" if isinstance(e, TooLong) else "invalid_audio"
        raise APIError(400, f"not usable audio: {e}", code, "file") from None


async def _run(request, rid: str, state: ServerState, cfg: ServeConfig, engine, batcher, req, data) -> Response:
    wave = await _decode(data, cfg, engine)
    del data
    spans = await run_in_threadpool(engine.cut, wave)
    try:
        job = batcher.submit([wave[s:e] for s, e in spans], words=req.words, request_id=rid, task=req.task)
    except WorkerDead:
        _door(state, batcher)
        raise
    outs = await _outcome(request, rid, state, batcher, job)
    clip = engine.timed(spans, outs, wave)
    words = clip["words"] if req.words else None
    task = req.task.task if req.task else "transcribe"
    spoken = req.language or next((o.get("language") for o in outs if o.get("language")), None) or "en"
    language = text.language_names().get(spoken, spoken)
    duration = len(wave) / SAMPLE_RATE
    return formats.render(req.response_format, clip["text"], clip["segments"], duration, words, task, language)


async def _outcome(request, rid: str, state: ServerState, batcher: Batcher, job) -> list:
    """The job's texts, or the error that is its request's alone; the client hanging up, or the server's
    shutdown deadline, takes its segments out of the queue."""
    result = asyncio.wrap_future(job.future)
    gone = asyncio.ensure_future(_client_gone(request.receive))
    cut = asyncio.ensure_future(state.cut.wait())
    try:
        await asyncio.wait({result, gone, cut}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        cut.cancel()
    if not result.done():
        batcher.cancel(job)  # its waiting segments leave the queue; a batch running with them drops their texts
        if state.cut.is_set():
            raise APIError(
                503,
                "the server shut down before this request finished (--shutdown-timeout); send it again",
                "shutting_down",
            )
        raise ClientDisconnect
    try:
        return result.result()
    except SegmentError as e:
        if e.input_fault:
            raise APIError(400, f"the model cannot transcribe this audio: {e}", "unusable_audio", "file") from None
        raise APIError(
            500, f"internal server error on this request (id {rid}; see the server's log)", "internal_error"
        ) from None
    except WorkerDead:
        raise APIError(
            503, "the server's model worker stopped before this request ran; send it again", "unhealthy"
        ) from None
