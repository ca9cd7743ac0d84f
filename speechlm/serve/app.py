"""The HTTP app: OpenAI's `POST /v1/audio/transcriptions`, `GET /v1/models`, and `GET /health`.

A request is read (bounded by the upload limit), checked field by field, decoded and cut as
`speechlm.transcribe` cuts a file (`engine`), and its segments go to the model worker (`batcher`), which
batches them with every other request's; the texts come back in order and are joined as `transcribe`
joins them.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from python_multipart.multipart import parse_options_header
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from speechlm.serve import errors, fields, formats
from speechlm.serve.batcher import Batcher
from speechlm.serve.config import ServeConfig
from speechlm.serve.engine import SAMPLE_RATE, BadAudio, Engine
from speechlm.serve.errors import APIError

log = logging.getLogger("speechlm.serve")
MAX_FIELD_BYTES = 64 * 1024  # a form field other than the file (a prompt): more is no transcription request


@dataclass
class ServerState:
    """What the server holds between requests: only counters and the draining flag (it is stateless)."""

    draining: bool = False
    in_flight: int = 0
    started: float = field(default_factory=time.time)
    counts: dict = field(
        default_factory=lambda: {"ok": 0, "client_errors": 0, "server_errors": 0, "busy": 0, "disconnected": 0}
    )


class _TooLarge(Exception):
    pass


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


async def read_form(request: Request, limit: int) -> FormData:
    """The multipart form, read no further than `limit` bytes (413 beyond it)."""
    too_large = APIError(
        413,
        f"the request is larger than the server's upload limit ({limit / 2**20:g} MB; --max-upload-mb)",
        "file_too_large",
        "file",
    )
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > limit:
        raise too_large
    seen, tail = 0, b""

    async def receive():
        nonlocal seen, tail
        message = await request.receive()
        body = message.get("body", b"")
        seen += len(body)
        if seen > limit:
            raise _TooLarge
        tail = (tail + body)[-256:]
        return message

    try:
        form = await Request(request.scope, receive).form(max_files=1, max_fields=20, max_part_size=MAX_FIELD_BYTES)
    except _TooLarge:
        raise too_large from None
    except HTTPException as e:  # Starlette's multipart parser: a malformed body
        raise APIError(400, f"could not read the multipart form: {e.detail}", "invalid_multipart") from None
    # python-multipart takes a body that stops short as a form without its last part: name the cause
    _, params = parse_options_header(request.headers.get("content-type", ""))
    boundary = params.get(b"boundary")
    if boundary and b"--" + boundary + b"--" not in tail:
        await form.close()
        raise APIError(
            400, "the multipart body ends before its closing boundary (a truncated upload)", "truncated_upload", "file"
        )
    return form


async def _client_gone(receive) -> None:
    """Returns when the client hangs up (the body is read by now, so the next message is the hang-up)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def create_app(cfg: ServeConfig, engine: Engine, batcher: Batcher, names: list[str]) -> FastAPI:
    state = ServerState()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        yield
        await run_in_threadpool(batcher.stop, 30.0)

    app = FastAPI(title="speechlm", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.serve = state
    errors.install(app)
    authorized = Depends(_check_key(cfg))

    @app.get("/health")
    async def health():
        body = {
            "status": "draining" if state.draining else "ok",
            "model": names[0],
            "requests_in_flight": state.in_flight,
            "max_concurrent": cfg.max_concurrent,
            "uptime_seconds": round(time.time() - state.started, 1),
            "requests": dict(state.counts),
            "batcher": batcher.stats(),
        }
        return JSONResponse(body, status_code=503 if state.draining else 200)

    @app.get("/v1/models", dependencies=[authorized])
    async def models():
        data = [{"id": n, "object": "model", "created": int(state.started), "owned_by": "speechlm"} for n in names]
        return {"object": "list", "data": data}

    @app.post("/v1/audio/transcriptions", dependencies=[authorized])
    async def transcriptions(request: Request):
        return await _admitted(state, cfg, lambda: _transcribe(request, cfg, engine, batcher, names))

    return app


async def _admitted(state: ServerState, cfg: ServeConfig, handle) -> Response:
    """One request through the server's door: refused while draining or full, counted by its outcome."""
    if state.draining:
        raise APIError(503, "the server is shutting down; send the request to another replica", "shutting_down")
    if state.in_flight >= cfg.max_concurrent:
        state.counts["busy"] += 1
        raise APIError(
            503,
            f"the server is at its limit of {cfg.max_concurrent} concurrent requests (--max-concurrent); retry",
            "server_busy",
            headers={"Retry-After": "1"},
        )
    state.in_flight += 1
    try:
        response = await handle()
        state.counts["ok"] += 1
        return response
    except APIError as e:
        state.counts["client_errors" if e.status < 500 else "server_errors"] += 1
        raise
    except ClientDisconnect:  # the client left: nobody to answer
        state.counts["disconnected"] += 1
        return Response(status_code=499)
    except Exception:
        state.counts["server_errors"] += 1
        raise
    finally:
        state.in_flight -= 1


async def _read_audio(request: Request, cfg: ServeConfig, engine: Engine, names: list[str]):
    """(the parsed request fields, its 16 kHz wave): every bad upload a 4xx naming the field."""
    form = await read_form(request, cfg.max_upload_bytes)
    try:
        req = fields.parse(form, names)
        data = await req.file.read()
    finally:
        await form.close()
    if not data:
        raise APIError(400, "the file is empty (0 bytes)", "empty_file", "file")
    try:
        wave = await run_in_threadpool(engine.decode, data)
    except BadAudio as e:
        raise APIError(400, f"not usable audio: {e}", "invalid_audio", "file") from None
    seconds = len(wave) / SAMPLE_RATE
    if seconds > cfg.max_seconds:
        raise APIError(
            400,
            f"the audio is {seconds:.1f} s long, over the server's limit of {cfg.max_seconds:g} s (--max-seconds)",
            "audio_too_long",
            "file",
        )
    return req, wave


async def _transcribe(request: Request, cfg: ServeConfig, engine: Engine, batcher: Batcher, names) -> Response:
    req, wave = await _read_audio(request, cfg, engine, names)
    spans = await run_in_threadpool(engine.cut, wave)
    job = batcher.submit([wave[s:e] for s, e in spans], words=req.words)
    result = asyncio.wrap_future(job.future)
    gone = asyncio.ensure_future(_client_gone(request.receive))
    try:
        await asyncio.wait({result, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not result.done():  # the client hung up: its segments leave the queue, its slot is free
        batcher.cancel(job)
        result.cancel()
        raise ClientDisconnect
    clip = engine.timed(spans, result.result(), wave)
    words = clip["words"] if req.words else None
    return formats.render(req.response_format, clip["text"], clip["segments"], len(wave) / SAMPLE_RATE, words)
