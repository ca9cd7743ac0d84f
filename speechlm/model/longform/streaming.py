"""Live transcription: audio fed in pieces, text committed as it goes and never taken back.

    stream = Streamer(model, StreamSettings(chunk_seconds=0.5))
    for piece in pieces:                       # 16 kHz mono float32, any length
        for event in stream.feed(piece):       # StreamEvent: delta, words, text, seconds, final
            print(event.delta, end="")
    for event in stream.finish():              # the rest committed; the last event has final=True
        ...

The policy (settings: `StreamSettings` in stream_settings.py, a frozen object like `LongForm`):
- **The window** is the audio since the last pause the stream has closed. Every `chunk_seconds` of
  new audio it is decoded again, the words committed so far in it given as the start of the
  model's answer (`SpeechLM.transcribe(prefixes=...)`), so the model only goes on after them.
- **LocalAgreement-n** (whisper_streaming's policy): the words the last `agreement` decodes agree
  on (case and punctuation ignored), beyond what is committed, are committed once heard to their
  end (their sound ended `word_margin_seconds` before the audio decoded did).
- **Pauses close the window.** The long-form cut (cut.py, `"segments"` with the stream's settings)
  finds the pauses in the window, its silence measured against the window and up to
  `context_seconds` of audio before it (the stream's loud level, not the window's), at every piece
  fed. Audio before a pause is complete: it is decoded at once, everything it says committed, and
  the window starts at the pause; silence before the first speech is dropped undecoded. A window past
  `max_window_seconds` is closed at its quietest point, as the cut does. So a stream decodes each
  sentence alone, as the offline long-form route does, and a model trained on single sentences
  (the demo) never sees two at once.
- **Only adds:** what is committed is a prefix of every later answer; an event's `delta` is text
  appended (`"".join` of all deltas is `text`). A model that glues letters onto a committed word
  ("cat" -> "cats") has them dropped (counted in `stats["glued"]`).
- `finish()` (end of audio, or an interrupted stream) closes the window at its pauses and commits
  whatever the last decode says.

Committed words carry times from the model's CTC head as offline transcription's do
(`SpeechLM.transcribe(timestamps=True)`, ends moved to where the sound ends: stitch.sound_ends),
on the stream's clock (seconds since its first sample).

Many streams on one model: `feed_many` decodes every due stream's window in one batch.

numpy and the standard library only (the model is duck-typed: `transcribe`, `features.min_samples`,
`family.max_seconds`), like the long-form modules, so an export can carry it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from .cut import segment_windows, silent_frames
from .settings import FRAME, SAMPLE_RATE
from .stitch import sound_ends
from .stream_settings import DEFAULT_STREAM_SETTINGS, StreamEvent, StreamSettings

__all__ = ["DEFAULT_STREAM_SETTINGS", "StreamEvent", "StreamSettings", "Streamer", "agreed", "feed_many", "stream_wave"]


@dataclass(frozen=True)
class _Decode:
    """One decode a stream asks for: its window from `start` to `end` (stream samples) after `prefix`."""

    kind: str  # "agree": LocalAgreement on the open window; "close": audio before a pause, all committed
    start: int
    end: int
    wave: np.ndarray = field(repr=False)
    prefix: str


def _norm(word: str) -> str:
    return "".join(c for c in word.lower() if c.isalnum()) or word


def agreed(hypotheses: Sequence[Sequence[dict]]) -> int:
    """How many words, from the start, every hypothesis has alike (case and punctuation ignored)."""
    if not hypotheses:
        return 0
    n = 0
    for column in zip(*hypotheses):
        if len({_norm(w["text"]) for w in column}) != 1:
            break
        n += 1
    return n


class Streamer:
    """One live stream on a model (module docstring). Not thread-safe: one caller feeds it."""

    def __init__(self, model, settings: StreamSettings = DEFAULT_STREAM_SETTINGS):
        if not isinstance(settings, StreamSettings):
            raise TypeError(f"settings must be a StreamSettings, got {type(settings).__name__}")
        self.model = model
        self.settings = settings.capped(getattr(model.family, "max_seconds", None))
        self._cut = self.settings.long_form()
        self._chunk = int(self.settings.chunk_seconds * SAMPLE_RATE)
        self._context = int(self.settings.context_seconds * SAMPLE_RATE) // FRAME * FRAME
        self._min_samples = max(int(model.features.min_samples), FRAME)
        self._audio = np.zeros(0, np.float32)  # the window and up to `context_seconds` before it
        self._base = 0  # stream sample of _audio[0]; it, and the window's start, fall on frame bounds
        self._start = 0  # stream sample where the window starts
        self._received = 0
        self._fresh = 0  # samples received since the last step
        self._decoded = 0  # stream sample where the last decode's audio ended
        self._hypotheses: deque = deque(maxlen=self.settings.agreement)  # the last decodes' words after the committed
        self._window_words: list[dict] = []  # committed words heard in the window: the prefix of its decodes
        self.words: list[dict] = []
        self.text = ""
        self.finished = False
        # decodes run; windows closed; words committed by agreement; answers that glued letters onto
        # the last committed word; seconds of silence dropped undecoded
        self.stats = {"decodes": 0, "closed": 0, "agreed": 0, "glued": 0, "silence_dropped_seconds": 0.0}

    # ------------------------------------------------------------------ the caller's side
    @property
    def seconds(self) -> float:
        """Audio received so far."""
        return self._received / SAMPLE_RATE

    @property
    def window_start(self) -> float:
        """Where the open window starts (stream seconds): audio before it is transcribed for good."""
        return self._start / SAMPLE_RATE

    def feed(self, piece) -> list[StreamEvent]:
        """Take the next piece of audio; every `chunk_seconds` of it, decode the window. The events of
        what that committed (none or one)."""
        decode = self._push(piece)
        return self._run([self], [decode])[0] if decode is not None else []

    def finish(self) -> list[StreamEvent]:
        """The stream has ended (or is stopped): decode what is left, commit all of it. The last event
        has `final=True` and the whole transcript; the stream takes no more audio."""
        if self.finished:
            raise RuntimeError("this stream has finished already")
        events = []
        # each decode closes the window at a pause (it moves on) or is the window's last
        while (decode := self._plan(final=True)) is not None:
            events += self._run([self], [decode])[0]
            if decode.end >= self._received:
                break
        self.finished = True
        return [*events, StreamEvent("", (), self.text, self.seconds, final=True)]

    # ------------------------------------------------------------------ steps
    def _push(self, piece) -> _Decode | None:
        """Take `piece`; the decode the window is due for, if it is."""
        if self.finished:
            raise RuntimeError("this stream has finished: it takes no more audio")
        piece = _samples(piece)
        self._audio = np.concatenate([self._audio, piece])
        self._received += len(piece)
        self._fresh += len(piece)
        if self._fresh < self._chunk and not self._paused():
            return None
        self._fresh = 0
        return self._plan(final=False)

    def _paused(self) -> bool:
        """Whether a pause follows sound in the window: it closes at once, not at the next chunk (the
        last words of a sentence are committed as soon as the cut sees its pause)."""
        ranges, silent = self._ranges(final=False)
        return any(not _all_silent(silent, *r) for r in ranges[:-1])

    def _plan(self, final: bool) -> _Decode | None:
        """The next decode: the audio before the window's first pause ("close"), else the whole window
        ("agree"; at the end of the stream, "close" too: everything it says is committed). Silence
        before the window's first sound is dropped undecoded, but for what the cut keeps before speech."""
        moved = True
        while moved:  # each round moves the window on, or returns
            ranges, silent = self._ranges(final)
            if not ranges:
                return None
            start, first = self._start, ranges[0]
            quiet = next((i for i, r in enumerate(ranges) if not _all_silent(silent, *r)), len(ranges))
            if quiet:  # leading silence, all of it at once (cut again, its start would be cut as a pause's)
                keep = 0 if quiet < len(ranges) else int(self.settings.keep_before_seconds * SAMPLE_RATE)
                self._move(max(start, start + ranges[quiet - 1][1] - keep) // FRAME * FRAME)
                self.stats["silence_dropped_seconds"] += (self._start - start) / SAMPLE_RATE
                moved = quiet < len(ranges) and self._start > start
                continue
            if len(ranges) > 1:
                cut = start + first[1] // FRAME * FRAME
                after = [w for w in self._window_words if w["start"] is not None and w["start"] * SAMPLE_RATE >= cut]
                if after or cut - start < self._min_samples:
                    # words after the pause are committed, so all before it were (or it is a click): no decode
                    self._move(cut, carry=True)
                    moved = self._start > start
                    continue
                return self._decode("close", cut)
            if self._received - start < self._min_samples:
                return None
            heard = silent[max(0, self._decoded - start) // FRAME :]
            if not final and len(heard) and heard.all():
                return None  # nothing but silence since the last decode: it would say the same
            return self._decode("close" if final else "agree", self._received)
        return None

    def _decode(self, kind: str, end: int) -> _Decode:
        self._decoded = end
        wave = self._audio[self._start - self._base : end - self._base]
        return _Decode(kind, self._start, end, wave, " ".join(w["text"] for w in self._window_words))

    def _ranges(self, final: bool) -> tuple[list[tuple[int, int]], np.ndarray]:
        """The long-form cut's tiles of the window (window samples) and its frames' silence, measured
        with the context before it. Until the stream ends, a pause still running at the window's end
        is no cut while it is shorter than the silence the cut keeps after and before speech: the cut
        then falls where the offline cut puts it (`keep_after_seconds` after the speech), so the
        decode hears the trailing silence a model trained with."""
        offset = (self._start - self._base) // FRAME
        silent = silent_frames(self._audio, self.settings.threshold_db)[offset:] if len(self._audio) >= FRAME else None
        window = self._audio[self._start - self._base :]
        if silent is None or not len(silent):
            return ([(0, len(window))] if len(window) else []), np.zeros(0, bool)
        ranges = segment_windows(window, self._cut, keep_silent=True, silent=silent)
        sound = np.flatnonzero(~silent)
        trailing = len(silent) - (sound[-1] + 1 if len(sound) else 0)
        keep = round((self.settings.keep_before_seconds + self.settings.keep_after_seconds) * SAMPLE_RATE / FRAME)
        if not final and trailing <= keep:
            settled = (len(silent) - trailing) * FRAME
            while len(ranges) > 1 and ranges[-1][0] >= settled:
                ranges = ranges[:-2] + [(ranges[-2][0], ranges[-1][1])]
        return ranges, silent

    def _apply(self, decode: _Decode, out: dict) -> list[StreamEvent]:
        """Commit what a decode's answer `out` ({"text", "words"}) settles."""
        self.stats["decodes"] += 1
        new = self._continuation(decode, out)
        if decode.kind == "agree":
            self._hypotheses.append(new)
            n = agreed(self._hypotheses) if len(self._hypotheses) == self._hypotheses.maxlen else 0
            n = min(n, _heard(new, decode.end / SAMPLE_RATE - self.settings.word_margin_seconds))
            new = new[:n]
            self.stats["agreed"] += n
            self._hypotheses = deque((h[n:] for h in self._hypotheses), maxlen=self._hypotheses.maxlen)
        event = self._commit(new)
        if decode.kind == "close":
            self.stats["closed"] += 1
            self._move(decode.end)
        return [event] if event is not None else []

    def _continuation(self, decode: _Decode, out: dict) -> list[dict]:
        """The answer's words after the prefix, on the stream's clock. The text's words are the
        answer's (a word the aligner decodes alone can differ in bytes it splits); the times are the
        aligner's word for word, none when it grouped the words otherwise."""
        said = out["text"].split()
        timed = [dict(w) for w in out.get("words") or []]
        if len(timed) == len(said):
            sound_ends(timed, decode.wave)
        else:
            timed = [{"start": None, "end": None, "confidence": 0.0} for _ in said]
        k = len(decode.prefix.split())
        if k and (len(said) < k or _norm(said[k - 1]) != _norm(decode.prefix.split()[-1])):
            self.stats["glued"] += 1  # letters glued onto the last committed word: they can't be added
        offset = decode.start / SAMPLE_RATE
        words = []
        for text, w in zip(said[k:], timed[k:]):
            placed = w["start"] is not None
            start, end = (round(w["start"] + offset, 4), round(w["end"] + offset, 4)) if placed else (None, None)
            words.append({"text": text, "start": start, "end": end, "confidence": w["confidence"]})
        return words

    def _commit(self, words: list[dict]) -> StreamEvent | None:
        if not words:
            return None
        delta = (" " if self.text else "") + " ".join(w["text"] for w in words)
        self.text += delta
        self.words += words
        self._window_words += words
        return StreamEvent(delta, tuple(words), self.text, self.seconds)

    def _move(self, start: int, carry: bool = False) -> None:
        """Start the window at `start` (a frame bound), forgetting its decodes: the committed words
        after it stay its prefix when `carry`; audio more than `context_seconds` before it goes."""
        if start <= self._start:
            return
        self._window_words = [
            w for w in self._window_words if carry and w["start"] is not None and w["start"] * SAMPLE_RATE >= start
        ]
        self._hypotheses.clear()
        self._start = start
        base = max(self._base, start - self._context)
        self._audio = self._audio[base - self._base :]
        self._base = base

    @staticmethod
    def _run(streams: Sequence[Streamer], decodes: Sequence[_Decode]) -> list[list[StreamEvent]]:
        """Decode the windows of `streams` in one batch and commit what each settles."""
        model = streams[0].model
        if any(s.model is not model for s in streams):
            raise ValueError("streams decoded together must share one model")
        outs = model.transcribe(
            [d.wave for d in decodes], details=True, timestamps=True, prefixes=[d.prefix for d in decodes]
        )
        return [s._apply(d, o) for s, d, o in zip(streams, decodes, outs)]


def feed_many(pairs: Sequence[tuple[Streamer, np.ndarray]]) -> list[list[StreamEvent]]:
    """`Streamer.feed` for many streams of one model: the windows due are decoded in one batch. The
    events per pair, in order."""
    decodes = [s._push(piece) for s, piece in pairs]
    due = [i for i, d in enumerate(decodes) if d is not None]
    events: list[list[StreamEvent]] = [[] for _ in pairs]
    if due:
        done = Streamer._run([pairs[i][0] for i in due], [decodes[i] for i in due])
        for i, ev in zip(due, done):
            events[i] = ev
    return events


def stream_wave(
    model, wave: np.ndarray, settings: StreamSettings = DEFAULT_STREAM_SETTINGS, piece_seconds: float = 0.1
) -> Iterator[StreamEvent]:
    """The events of a recording fed to a new stream in pieces of `piece_seconds` as fast as it
    decodes (a file streamed as it is decoded: the decodes fall where they would live), `finish()`'s last."""
    if not piece_seconds * SAMPLE_RATE >= 1:
        raise ValueError(f"piece_seconds must be positive, got {piece_seconds}")
    stream = Streamer(model, settings)
    wave = _samples(wave)
    step = int(piece_seconds * SAMPLE_RATE)
    for i in range(0, len(wave), step):
        yield from stream.feed(wave[i : i + step])
    yield from stream.finish()


def _samples(piece) -> np.ndarray:
    """A piece of audio as float32 samples, or a clear error."""
    a = np.asarray(piece)
    if a.ndim != 1:
        raise ValueError(f"audio must be 1-D mono samples, got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.floating):
        raise ValueError(
            f"audio must be float samples in [-1, 1] at {SAMPLE_RATE} Hz, got {a.dtype} (PCM16: divide by 32768)"
        )
    a = a.astype(np.float32, copy=False)
    if not np.isfinite(a).all():
        raise ValueError("audio holds NaN or infinite samples")
    return a


def _heard(words: Sequence[dict], until: float) -> int:
    """How many of `words`, from the start, end by `until` (stream seconds): heard to their end. An
    unplaced word counts as heard (the aligner placed none of the answer: no time to go by)."""
    return next((i for i, w in enumerate(words) if w["end"] is not None and w["end"] > until), len(words))


def _all_silent(silent: np.ndarray, s: int, e: int) -> bool:
    frames = silent[s // FRAME : min(len(silent), -(-e // FRAME))]
    return len(frames) > 0 and bool(frames.all())
