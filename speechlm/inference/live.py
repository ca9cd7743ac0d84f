"""Live transcription of raw PCM read as it arrives (`speechlm transcribe --live`): s16le, 16 kHz,
mono, from a pipe or a file (`ffmpeg -i IN -f s16le -ac 1 -ar 16000 - | speechlm transcribe --live -m
MODEL -`), fed to a `Streamer` in pieces of `piece_seconds` as they are read.

Each piece is read whole (a pipe's read waits for its bytes), so the stream's pieces, and with them
its decodes and its text, do not depend on how the writer's bytes were timed: `stream_wave` of the
same samples with the same `piece_seconds` commits the same words. A last odd byte (half a sample) is
an error, as is audio that is not 16-bit samples' worth of bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import numpy as np

from speechlm.model.longform.settings import SAMPLE_RATE
from speechlm.model.longform.stream_settings import DEFAULT_STREAM_SETTINGS, StreamEvent, StreamSettings
from speechlm.model.longform.streaming import Streamer

PIECE_SECONDS = 0.1  # what a read waits for: at most this much latency added to the stream's own


def pcm_pieces(source: BinaryIO, piece_seconds: float = PIECE_SECONDS) -> Iterator[np.ndarray]:
    """float32 pieces of `piece_seconds` (the last may be shorter) of s16le mono PCM read from `source`."""
    size = 2 * max(1, int(piece_seconds * SAMPLE_RATE))
    while True:
        data = source.read(size)
        if not data:
            return
        if len(data) % 2:
            raise ValueError(
                f"the PCM input ends in half a sample ({len(data)} bytes in its last piece): s16le is 2 bytes a sample"
            )
        yield np.frombuffer(data, "<i2").astype(np.float32) / 32768.0


class Asking:
    """The model as a `Streamer` sees it (`transcribe`, `features`, `family`), every decode asked `asked`:
    SpeechLM.transcribe's language, task and context (`speechlm.inference.Task.kwargs()`)."""

    def __init__(self, model, asked: dict):
        self.family, self.features = model.family, model.features
        self._model, self._asked = model, dict(asked)

    def transcribe(self, waves, **kwargs) -> list:
        return self._model.transcribe(waves, **kwargs, **self._asked)


def transcribe_live(
    model,
    source: BinaryIO,
    settings: StreamSettings = DEFAULT_STREAM_SETTINGS,
    piece_seconds: float = PIECE_SECONDS,
    asked: dict | None = None,
) -> Iterator[StreamEvent]:
    """The events of a live stream of the PCM read from `source`, as they are committed; `finish()`'s
    last (final=True) once the input ends. `asked`: what every decode is asked (`Task.kwargs()`)."""
    stream = Streamer(Asking(model, asked) if asked else model, settings)
    for piece in pcm_pieces(source, piece_seconds):
        yield from stream.feed(piece)
    yield from stream.finish()
