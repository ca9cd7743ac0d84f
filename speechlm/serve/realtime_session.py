"""A realtime transcription session's state (serve/realtime.py is its WebSocket): its settings as
`session.update` sets them (checked field by field: a bad one is an `error` event naming it), the
item (turn) being heard, its live `Streamer`, the resampler of its input rate and its server VAD
(serve/turns.py)."""

from __future__ import annotations

import uuid

import numpy as np
import soxr

from speechlm import text
from speechlm.inference import DEFAULT_STREAM_SETTINGS, SAMPLE_RATE, Streamer, Task
from speechlm.serve import live
from speechlm.serve.turns import TurnDetector

RATES = (24000, SAMPLE_RATE)  # audio/pcm input rates taken: OpenAI's, and the model's own
MIN_COMMIT_SECONDS = 0.1  # OpenAI's: a commit of less audio is an error
SERVER_VAD = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500}


class BadEvent(Exception):
    """A client message the session refuses: an `error` event (code, param), and the session goes on."""

    def __init__(self, message: str, code: str, param: str | None = None):
        super().__init__(message)
        self.code, self.param = code, param


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


def error_event(message: str, code: str, param: str | None = None, kind: str = "invalid_request_error") -> dict:
    return {"type": "error", "error": {"type": kind, "code": code, "message": message, "param": param}}


def _setting(section: dict, name: str, kind, where: str):
    value = section.get(name)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise BadEvent(
            f"{where}.{name} must be a {kind.__name__ if isinstance(kind, type) else 'number'}",
            "invalid_value",
            f"{where}.{name}",
        )
    return value


def _format(fmt, where: str) -> int:
    """The input rate of an audio format object (audio/pcm only)."""
    if not isinstance(fmt, dict):
        raise BadEvent(f"{where} must be an object", "invalid_value", where)
    if fmt.get("type", "audio/pcm") != "audio/pcm":
        raise BadEvent(
            f"{where}.type '{fmt.get('type')}' is not supported: send audio/pcm (PCM16)",
            "unsupported_value",
            f"{where}.type",
        )
    rate = fmt.get("rate", 24000)
    if rate not in RATES:
        raise BadEvent(
            f"{where}.rate must be one of {', '.join(map(str, RATES))}, got {rate!r}",
            "unsupported_value",
            f"{where}.rate",
        )
    return rate


def _turn_detection(td, where: str) -> dict | None:
    if td is None:
        return None
    if not isinstance(td, dict) or td.get("type", "server_vad") != "server_vad":
        kind = td.get("type") if isinstance(td, dict) else td
        raise BadEvent(
            f"{where}.type '{kind}' is not supported: use server_vad or null", "unsupported_value", f"{where}.type"
        )
    out = {**SERVER_VAD, **{k: v for k, v in td.items() if v is not None}}
    for name in ("threshold", "prefix_padding_ms", "silence_duration_ms"):
        _setting(out, name, (int, float), where)
    try:
        TurnDetector(out["silence_duration_ms"], out["threshold"])
    except ValueError as e:
        raise BadEvent(f"{where}: {e}", "invalid_value", where) from None
    return out


class Session:
    """One transcription session: its settings, the item (turn) being heard, and its live stream."""

    def __init__(self, names: list[str], engine, batcher, state, cfg, rid: str):
        self.names, self.engine, self.state, self.cfg = names, engine, state, cfg
        self.model = live.QueuedModel(engine, batcher, rid)
        self.received = 0  # 16 kHz samples of the session
        self.previous: str | None = None  # the last committed item
        self.config = {
            "type": "transcription",
            "id": new_id("sess"),
            "object": "realtime.transcription_session",
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": 24000},
                    "transcription": {
                        "model": names[0],
                        "language": None if engine.multilingual else "en",  # None: each turn's is detected
                        "prompt": "",
                    },
                    "turn_detection": dict(SERVER_VAD),
                    "noise_reduction": None,
                }
            },
        }
        self._configure()
        self._new_item()

    # ------------------------------------------------------------------ settings
    @property
    def _input(self) -> dict:
        return self.config["audio"]["input"]

    def _configure(self) -> None:
        rate = self._input["format"]["rate"]
        self._resampler = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32") if rate != SAMPLE_RATE else None
        td = self._input["turn_detection"]
        self._vad = TurnDetector(td["silence_duration_ms"], td["threshold"]) if td else None
        self._vad_origin = self.received

    def update(self, session) -> list[dict]:
        where = "session"
        if not isinstance(session, dict):
            raise BadEvent("session.update needs a 'session' object", "invalid_value", where)
        if session.get("type", "transcription") != "transcription":
            raise BadEvent(
                "this endpoint serves transcription sessions: session.type must be 'transcription'",
                "unsupported_value",
                "session.type",
            )
        given = (session.get("audio") or {}).get("input") or {}
        new = dict(self._input)
        if "format" in given:
            _format(given["format"], "session.audio.input.format")
            new["format"] = {"type": "audio/pcm", "rate": given["format"].get("rate", 24000)}
        asked = self.model.task
        if "transcription" in given:
            new["transcription"], asked = self._transcription(given["transcription"] or {})
        if "turn_detection" in given:
            new["turn_detection"] = _turn_detection(given["turn_detection"], "session.audio.input.turn_detection")
        self.config["audio"]["input"] = new
        self.model.task = asked  # only once every field of the update is valid
        self._configure()
        return [{"type": "session.updated", "event_id": new_id("event"), "session": self.config}]

    def _transcription(self, t: dict) -> tuple[dict, Task | None]:
        """(the session's transcription settings, what each decode is asked: speechlm.inference.Task)."""
        where = "session.audio.input.transcription"
        model = t.get("model") or self.names[0]
        if model not in self.names:
            raise BadEvent(
                f"the model '{model}' does not exist; this server has {', '.join(self.names)}",
                "model_not_found",
                f"{where}.model",
            )
        lang, prompt = t.get("language"), t.get("prompt") or ""
        if not isinstance(prompt, str):
            raise BadEvent("the prompt must be a string", "invalid_value", f"{where}.prompt")
        try:  # a language of the model's list (English for a model that lists none), as on the HTTP route
            code = text.language_code(str(lang), self.engine.languages) if lang else None
        except ValueError as e:
            raise BadEvent(str(e), "unsupported_language", f"{where}.language") from None
        # the decodes of the session's turns are asked as an HTTP request with these fields is (app._transcribe)
        asked = Task(code if self.engine.multilingual else None, "transcribe", prompt.strip() or None)
        shown = lang or (None if self.engine.multilingual else "en")
        return {"model": model, "language": shown, "prompt": prompt}, (asked if asked != Task() else None)

    # ------------------------------------------------------------------ audio
    def _new_item(self) -> None:
        self.item_id = new_id("item")
        self.stream = Streamer(self.model, DEFAULT_STREAM_SETTINGS)
        self.item_samples = 0

    def _pcm(self, data: bytes) -> np.ndarray:
        x = np.frombuffer(data, "<i2").astype(np.float32) / 32768.0
        if self._resampler is not None:
            x = self._resampler.resample_chunk(x)
        return np.asarray(x, np.float32)

    async def append(self, data: bytes) -> list[dict]:
        """PCM16 bytes of the input format: fed to the item's stream, turns cut where the VAD says."""
        x = self._pcm(data)
        if self.received + len(x) > self.cfg.max_seconds * SAMPLE_RATE:
            raise SessionOver(
                f"the session's audio is over the server's limit of {self.cfg.max_seconds:g} s (--max-seconds)",
                "audio_too_long",
            )
        base = self.received
        self.received += len(x)
        edges = self._vad.push(x) if self._vad is not None else []
        out, pos = [], 0
        for edge in edges:
            if edge[0] == "started":
                pad = int(self._input["turn_detection"]["prefix_padding_ms"] * SAMPLE_RATE / 1000)
                start = self._ms(max(0, edge[1] - pad))
                out.append(self._event("input_audio_buffer.speech_started", audio_start_ms=start))
                continue
            cut = min(len(x), max(pos, edge[2] + self._vad_origin - base))
            out += await self._feed(x[pos:cut])
            pos = cut
            out.append(self._event("input_audio_buffer.speech_stopped", audio_end_ms=self._ms(edge[1])))
            out += await self.commit(flush=False)
        return out + await self._feed(x[pos:])

    def _ms(self, vad_sample: int) -> int:
        """Milliseconds of the session's audio at a sample of the VAD's clock."""
        return int((vad_sample + self._vad_origin) * 1000 // SAMPLE_RATE)

    async def _feed(self, x: np.ndarray) -> list[dict]:
        if not len(x):
            return []
        self.item_samples += len(x)
        events = await live.step(self.stream.feed, x, limiter=self.state.live_limiter)
        return [self._delta(e.delta) for e in events]

    async def commit(self, flush: bool = True) -> list[dict]:
        """The item ends: its stream finishes, its transcript is completed, a new item begins."""
        out = []
        if flush and self._resampler is not None:  # the resampler's last samples, then a fresh one
            out += await self._feed(
                np.asarray(self._resampler.resample_chunk(np.zeros(0, np.float32), last=True), np.float32)
            )
            self._configure()
        if self.item_samples < MIN_COMMIT_SECONDS * SAMPLE_RATE:
            raise BadEvent(
                f"the buffer holds {self.item_samples / SAMPLE_RATE * 1000:.0f} ms of audio: "
                f"a commit needs at least {MIN_COMMIT_SECONDS * 1000:.0f} ms",
                "input_audio_buffer_commit_empty",
            )
        out.append(self._event("input_audio_buffer.committed", previous_item_id=self.previous))
        finished = await live.step(self.stream.finish, limiter=self.state.live_limiter)
        out += [self._delta(e.delta) for e in finished if e.delta]
        text = self.stream.text
        usage = self.engine.usage(self.item_samples, text)
        out.append(
            self._event(
                "conversation.item.input_audio_transcription.completed", content_index=0, transcript=text, usage=usage
            )
        )
        self.previous = self.item_id
        self._new_item()
        return out

    def clear(self) -> list[dict]:
        self._new_item()
        self._configure()
        return [self._event("input_audio_buffer.cleared", item_id=None)]

    def _delta(self, delta: str) -> dict:
        return self._event("conversation.item.input_audio_transcription.delta", content_index=0, delta=delta)

    def _event(self, kind: str, **fields) -> dict:
        return {"type": kind, "event_id": new_id("event"), "item_id": self.item_id, **fields}


class SessionOver(BadEvent):
    """A message that ends the session (after its `error` event)."""
