"""Live transcription's settings (`StreamSettings`) and what a stream emits (`StreamEvent`): the
policy itself is streaming.py's. numpy and the standard library only, like the long-form modules."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .settings import (
    FRAME,
    KEEP_AFTER_SECONDS,
    KEEP_BEFORE_SECONDS,
    MIN_PAUSE_SECONDS,
    SAMPLE_RATE,
    THRESHOLD_DB,
    LongForm,
)

# a decode per half second of new audio: the first committed word of a sentence 1.45 s after its end
# (median) on the demo against 1.9 s at whisper_streaming's 1 s, for 1.5x the decodes
# (docs/benchmarks.md, "Live transcription")
CHUNK_SECONDS = 0.5
AGREEMENT = 2  # LocalAgreement-2
MAX_WINDOW_SECONDS = 15.0  # within the demo's training clips (at most 19-20 s)
# a word is committed by agreement only once its sound ended this long before the audio decoded did:
# a word the window cuts off ("an-" of "animal") can be heard alike twice, and wrong
WORD_MARGIN_SECONDS = 0.2
CONTEXT_SECONDS = 10.0  # audio before the window that sets the loud level silence is measured against


@dataclass(frozen=True)
class StreamSettings:
    """How a live stream is decoded and committed (streaming.py's docstring). The pause fields are the
    long-form cut's (`LongForm`, same names and defaults). Checked when made: a bad value raises
    ValueError naming its field."""

    chunk_seconds: float = CHUNK_SECONDS
    agreement: int = AGREEMENT
    max_window_seconds: float = MAX_WINDOW_SECONDS
    word_margin_seconds: float = WORD_MARGIN_SECONDS
    context_seconds: float = CONTEXT_SECONDS
    threshold_db: float = THRESHOLD_DB
    min_pause_seconds: float = MIN_PAUSE_SECONDS
    keep_before_seconds: float = KEEP_BEFORE_SECONDS
    keep_after_seconds: float = KEEP_AFTER_SECONDS

    def __post_init__(self):
        if not self.chunk_seconds * SAMPLE_RATE >= FRAME:
            raise ValueError(f"chunk_seconds must be at least 0.01 s (one frame), got {self.chunk_seconds}")
        if isinstance(self.agreement, bool) or not isinstance(self.agreement, int) or self.agreement < 1:
            raise ValueError(f"agreement must be an integer >= 1 (decodes that agree), got {self.agreement!r}")
        if not self.max_window_seconds > self.chunk_seconds:
            raise ValueError(
                f"max_window_seconds must be more than chunk_seconds ({self.chunk_seconds}), "
                f"got {self.max_window_seconds}"
            )
        if not self.word_margin_seconds >= 0:
            raise ValueError(f"word_margin_seconds must be >= 0, got {self.word_margin_seconds}")
        if not self.context_seconds >= 0:
            raise ValueError(f"context_seconds must be >= 0, got {self.context_seconds}")
        self.long_form()  # the pause fields, checked by LongForm under their own names

    def long_form(self) -> LongForm:
        """The long-form cut a window is cut with: `"segments"`, one segment per pause."""
        return LongForm(
            strategy="segments",
            window_seconds=self.max_window_seconds,
            threshold_db=self.threshold_db,
            min_pause_seconds=self.min_pause_seconds,
            merge_seconds=0.0,
            keep_before_seconds=self.keep_before_seconds,
            keep_after_seconds=self.keep_after_seconds,
        )

    def capped(self, limit: float | None) -> StreamSettings:
        """These settings with the window at most `limit` seconds (an encoder's longest input; None: none)."""
        if not limit or limit >= self.max_window_seconds:
            return self
        return replace(self, max_window_seconds=limit, chunk_seconds=min(self.chunk_seconds, limit / 2))


DEFAULT_STREAM_SETTINGS = StreamSettings()


@dataclass(frozen=True)
class StreamEvent:
    """Text committed by one step of a stream."""

    delta: str  # the text committed now, appended to what came before ("".join of every delta is `text`)
    words: tuple  # the words committed now: {"text", "start", "end", "confidence"}, stream seconds (None: unplaced)
    text: str  # everything committed so far
    seconds: float  # audio the stream had received when this was committed
    final: bool = False  # the last event of `finish()`: `text` is the stream's whole transcript
