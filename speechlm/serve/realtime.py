"""OpenAI's Realtime API for transcription: a WebSocket at `/v1/realtime?intent=transcription`.

The client sends (JSON text messages, OpenAI's shapes):
- `session.update` {"session": {"type": "transcription", "audio": {"input": {"format": {"type":
  "audio/pcm", "rate": 24000}, "transcription": {"model", "language", "prompt"}, "turn_detection":
  {"type": "server_vad", "threshold", "silence_duration_ms", "prefix_padding_ms"} or null}}}};
  answered by `session.updated` with the whole session. PCM16 at 24 kHz (OpenAI's rate) is resampled
  to 16 kHz by soxr's stream; 16 kHz is taken as it is. `model` must be a served name, `language`
  one of the model's languages (or absent: detected), `prompt` context for the model: each decode of
  the session's turns is asked them as an HTTP request with those fields is (serve/fields.py).
- `input_audio_buffer.append` {"audio": base64 of little-endian PCM16 mono};
- `input_audio_buffer.commit` (the buffer is one item: its transcript is completed now) and
  `input_audio_buffer.clear` (the buffer is dropped untranscribed).

The server sends `session.created` on connecting; per item (one turn of speech):
`input_audio_buffer.speech_started` / `.speech_stopped` (server VAD: serve/turns.py, the long-form
cut's silence detector), `input_audio_buffer.committed`,
`conversation.item.input_audio_transcription.delta` ({"delta"}) as a live `Streamer` commits words
(while the audio still arrives, before the commit), and `.completed` ({"transcript": every delta
joined, "usage"}). With server VAD a turn is committed when its silence lasts `silence_duration_ms`;
with `turn_detection: null` only the client's commit ends an item.

The HTTP routes' rules hold: the API key (`Authorization: Bearer KEY`, or the browsers' subprotocol
`openai-insecure-api-key.KEY`), refused with OpenAI's 401 before the socket opens; a session takes a
`--max-concurrent` slot for its life (503 `server_busy` when full, `shutting_down` while draining);
a session's audio is at most `--max-seconds` and one message at most `--max-upload-mb`. A bad message
(not JSON, an unknown type, bad base64, an odd byte count, a bad setting) is an `error` event that
names it, and the session goes on. On SIGTERM each session commits the audio it holds (its
`completed` goes out), then gets an `error` event `shutting_down` and is closed (1001); at the
shutdown deadline its decodes are called off. A client that drops the connection cancels its
stream's decode in the queue.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging

from starlette.websockets import WebSocket, WebSocketDisconnect

from speechlm.inference import SAMPLE_RATE
from speechlm.serve import live
from speechlm.serve.errors import APIError, error_response
from speechlm.serve.realtime_session import MIN_COMMIT_SECONDS, BadEvent, Session, SessionOver, error_event, new_id

log = logging.getLogger("speechlm.serve")

QUEUE_MESSAGES = 256  # messages read ahead of the session's work; then the socket waits (backpressure)
DRAIN_POLL_SECONDS = 0.2


def _key(websocket: WebSocket) -> str | None:
    """The client's API key: the Authorization header, or the browsers' subprotocol."""
    scheme, _, key = websocket.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and key.strip():
        return key.strip()
    for proto in websocket.headers.get("sec-websocket-protocol", "").split(","):
        if proto.strip().startswith("openai-insecure-api-key."):
            return proto.strip().removeprefix("openai-insecure-api-key.")
    return None


_GONE = object()  # the client disconnected


async def _reader(websocket: WebSocket, inbox: asyncio.Queue, closed: list) -> None:
    """The client's messages into `inbox` (text, or a BadEvent for a binary one), then _GONE; the close
    code the client sent goes into `closed`."""
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                closed.append(message.get("code", 1006))
                break
            if message.get("text") is not None:
                await inbox.put(message["text"])
            else:
                await inbox.put(
                    BadEvent(
                        "send JSON text messages (audio goes base64 in input_audio_buffer.append)", "invalid_message"
                    )
                )
    finally:
        await inbox.put(_GONE)


def _parse(message) -> dict:
    if isinstance(message, BadEvent):
        raise message
    try:
        event = json.loads(message)
    except json.JSONDecodeError as e:
        raise BadEvent(f"not JSON: {e}", "invalid_json") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise BadEvent("an event is a JSON object with a 'type'", "invalid_event", "type")
    return event


def _audio(event: dict) -> bytes:
    audio = event.get("audio")
    if not isinstance(audio, str):
        raise BadEvent("input_audio_buffer.append needs 'audio': base64 of PCM16 samples", "invalid_value", "audio")
    try:
        data = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError):
        raise BadEvent("'audio' is not valid base64", "invalid_audio", "audio") from None
    if len(data) % 2:
        raise BadEvent(f"'audio' holds {len(data)} bytes: PCM16 is 2 bytes a sample", "invalid_audio", "audio")
    return data


def _more_audio(message) -> bytes | None:
    """The audio of a queued append that can join the one in hand; None for anything else."""
    if message is _GONE:
        return None
    try:
        event = _parse(message)
        return _audio(event) if event["type"] == "input_audio_buffer.append" else None
    except BadEvent:
        return None


async def _next(inbox: asyncio.Queue, state):
    """The next message; None once the server drains and nothing is queued."""
    while True:
        if state.draining and inbox.empty():
            return None
        try:
            return await asyncio.wait_for(inbox.get(), DRAIN_POLL_SECONDS)
        except asyncio.TimeoutError:
            continue


async def _handle(session: Session, message, inbox: asyncio.Queue) -> tuple[list[dict], object]:
    """The events answering one message (appends already queued behind it are taken with it: audio that
    arrived during a decode is fed at once), and a message read ahead that is still to handle."""
    event = _parse(message)
    kind = event["type"]
    if kind == "input_audio_buffer.append":
        data, ahead = [_audio(event)], None
        while not inbox.empty() and ahead is None:
            nxt = inbox.get_nowait()
            more = _more_audio(nxt)
            if more is None:
                ahead = nxt
            else:
                data.append(more)
        return await session.append(b"".join(data)), ahead
    if kind == "session.update":
        return session.update(event.get("session")), None
    if kind == "input_audio_buffer.commit":
        return await session.commit(), None
    if kind == "input_audio_buffer.clear":
        return session.clear(), None
    raise BadEvent(f"unknown or unsupported event type '{kind}' for a transcription session", "unknown_event", "type")


def install(app, cfg, engine, batcher, names: list[str], state) -> None:
    """The route `/v1/realtime` on `app` (speechlm/serve/app.py's `create_app` calls this)."""
    expected = cfg.api_key.encode() if cfg.api_key else None

    @app.websocket("/v1/realtime")
    async def realtime(websocket: WebSocket):
        refusal = _refusal(websocket, expected, names, cfg, state, batcher)
        if refusal is not None:
            await websocket.send_denial_response(error_response(refusal))
            return
        offered = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",")]
        await websocket.accept(subprotocol="realtime" if "realtime" in offered else None)
        state.in_flight += 1
        try:
            session = Session(names, engine, batcher, state, cfg, new_id("sess"))
            outcome = await _run(websocket, session, state)
        finally:
            state.in_flight -= 1
        state.counts[outcome] += 1


def _refusal(websocket: WebSocket, expected: bytes | None, names, cfg, state, batcher) -> APIError | None:
    """Why a connection is refused before it opens (OpenAI's error, as an HTTP answer), or None."""
    if expected is not None:
        key = _key(websocket)
        if key is None:
            return APIError(401, "missing API key: send the header 'Authorization: Bearer KEY'", "missing_api_key")
        if not hmac.compare_digest(key.encode(), expected):
            return APIError(401, "incorrect API key", "invalid_api_key")
    if websocket.query_params.get("intent") != "transcription":
        msg = "this server's realtime sessions are transcription sessions: connect to /v1/realtime?intent=transcription"
        return APIError(400, msg, "unsupported_value", "intent")
    model = websocket.query_params.get("model")
    if model and model not in names:
        return APIError(
            404, f"the model '{model}' does not exist; this server has {', '.join(names)}", "model_not_found", "model"
        )
    if state.draining:
        return APIError(503, "the server is shutting down; connect to another replica", "shutting_down")
    if not batcher.alive:
        return APIError(503, "the server's model worker has stopped; connect to another replica", "unhealthy")
    if state.in_flight >= cfg.max_concurrent:
        msg = f"the server is at its limit of {cfg.max_concurrent} concurrent requests (--max-concurrent); retry"
        return APIError(503, msg, "server_busy", headers={"Retry-After": "1"})
    return None


async def _run(websocket: WebSocket, session: Session, state) -> str:
    """The session until the client leaves, the server drains, or a fault ends it; how it ended (a
    key of the server's request counts)."""
    inbox: asyncio.Queue = asyncio.Queue(QUEUE_MESSAGES)
    closed: list = []
    reader = asyncio.ensure_future(_reader(websocket, inbox, closed))
    cut = asyncio.ensure_future(state.cut.wait())
    cut.add_done_callback(lambda _: session.model.close())  # the shutdown deadline calls the decodes off
    try:
        await _send(websocket, {"type": "session.created", "event_id": new_id("event"), "session": session.config})
        await _loop(websocket, session, state, inbox)
        return "ok" if not closed or closed[0] in (1000, 1001) else "disconnected"  # a close, or a drop
    except WebSocketDisconnect:
        return "disconnected"
    except live.StreamClosed:
        msg = "the server shut down before this session's audio was transcribed (--shutdown-timeout)"
        await _close(websocket, [error_event(msg, "shutting_down", kind="server_error")], 1001)
        return "ok"
    except Exception as e:  # noqa: BLE001 -- a decode failed: the client hears why, the log has the rest
        await _close(websocket, [live.failure(e, session.config["id"])], 1011)
        return "server_errors"
    finally:
        reader.cancel()
        cut.cancel()
        session.model.close()


async def _loop(websocket: WebSocket, session: Session, state, inbox: asyncio.Queue) -> None:
    ahead = None
    while True:
        message = ahead if ahead is not None else await _next(inbox, state)
        ahead = None
        if message is None:  # draining: the audio held is committed, then the session ends
            out = await session.commit() if session.item_samples >= MIN_COMMIT_SECONDS * SAMPLE_RATE else []
            msg = "the server is shutting down: the audio received was transcribed; reconnect to another replica"
            await _close(websocket, [*out, error_event(msg, "shutting_down", kind="server_error")], 1001)
            return
        if message is _GONE:
            return
        try:
            out, ahead = await _handle(session, message, inbox)
        except SessionOver as e:
            await _close(websocket, [error_event(str(e), e.code, e.param)], 1008)
            return
        except BadEvent as e:
            out = [error_event(str(e), e.code, e.param)]
        for event in out:
            await _send(websocket, event)


async def _send(websocket: WebSocket, event: dict) -> None:
    """One event; a connection that is gone (uvicorn says so with a RuntimeError) is a disconnect."""
    try:
        await websocket.send_json(event)
    except (RuntimeError, OSError):
        raise WebSocketDisconnect(1006) from None


async def _close(websocket: WebSocket, events: list[dict], code: int) -> None:
    """Send the last events and close; a client already gone hears nothing."""
    try:
        for event in events:
            await _send(websocket, event)
        await websocket.close(code)
    except (WebSocketDisconnect, RuntimeError, OSError):
        pass
