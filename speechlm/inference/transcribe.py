"""A model's transcripts of clips of any length, as `speechlm transcribe`, `speechlm eval` and the server
give them: audio loading with clear errors, the `max_seconds` bound, the long-form settings fitted to
the model's encoder, and its batch function under the windowed, sorted, batched job (`batching`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from speechlm import audio
from speechlm.config import ConfigError
from speechlm.model.longform.batching import transcribe_long, transcribe_windows
from speechlm.model.longform.cut import clip_spans as cut_spans
from speechlm.model.longform.settings import DEFAULT_LONG_FORM, LongForm
from speechlm.model.longform.stitch import join, timed_clip

MAX_SECONDS = 4 * 3600.0  # the longest input accepted by default: a long meeting


def long_form_for(model, long_form: LongForm = DEFAULT_LONG_FORM) -> LongForm:
    """`long_form` with its window at most the model's encoder takes (Whisper's 30 s, say)."""
    return long_form.capped(model.family.max_seconds)


def load_clip(src, name: str, max_seconds: float | None = MAX_SECONDS) -> np.ndarray:
    """16 kHz mono audio of a file path, bytes or an already decoded 16 kHz array (the shard reader's);
    a ConfigError naming `name` when it can't be used."""
    try:
        wave = audio.check_clip(src, name) if isinstance(src, np.ndarray) else audio.load(src, name)
    except audio.AudioError as e:
        raise ConfigError(str(e)) from None
    if max_seconds and len(wave) > max_seconds * audio.SAMPLE_RATE:
        raise ConfigError(
            f"{name}: {len(wave) / audio.SAMPLE_RATE:.1f} s is longer than max_seconds "
            f"({max_seconds:g} s); raise --max-seconds to accept it"
        )
    return wave


def batch_transcriber(
    model, stops: dict | None = None, timestamps: bool = False, task: Task | None = None, details: bool = False
) -> Callable[[list[np.ndarray]], list]:
    """The texts of one batch of windows (`SpeechLM.transcribe`), as `transcribe_waves` batches them
    (with `timestamps` or `details`, dicts with the text, its words, the language); `stops`, if given,
    counts the windows whose generation ended on the token budget ("capped") or the loop rule
    ("loops_truncated") rather than on end-of-turn. `task`: the language and task every window is asked
    for (default: transcription, the language not given)."""
    task = task or Task()

    def batch(ws: list[np.ndarray]) -> list:
        outs = model.transcribe(ws, details=True, timestamps=timestamps, **task.kwargs())
        if stops is not None:
            stops["capped"] = stops.get("capped", 0) + sum(bool(o["capped"]) for o in outs)
            stops["loops_truncated"] = stops.get("loops_truncated", 0) + sum(bool(o["loop"]) for o in outs)
        return outs if timestamps or details else [o["text"] for o in outs]

    return batch


@dataclass(frozen=True)
class Task:
    """What a route asks of every clip: its language (ISO 639-1; None: the model detects it), its task
    (transcribe, translate, or a task of the model's task_prompts) and the caller's context (OpenAI's
    `prompt`, `--prompt`: text after the instruction in the user turn; None: none)."""

    language: str | None = None
    task: str = "transcribe"
    context: str | None = None

    def kwargs(self) -> dict:
        """SpeechLM.transcribe's arguments; none for the default, so a model of any age takes them."""
        if self == Task():
            return {}
        asked = {"language": self.language, "task": self.task}
        return asked | {"context": self.context} if self.context else asked


def transcribe_detected(
    model, waves: list[np.ndarray], batch_size: int = 16, long_form: LongForm = DEFAULT_LONG_FORM, stops=None, task=None
) -> list[dict]:
    """Per clip {"text", "language"}: the transcript (or the task's answer) as `transcribe_waves` gives it,
    and the language the model named for its first window (the pinned one, when `task` gives one; None
    from a model that does not open its answers with the language)."""
    lf = long_form_for(model, long_form)
    waves = audio.check_clips(waves)
    run = batch_transcriber(model, stops, task=task, details=True)
    _, outs = transcribe_windows(run, waves, lf, batch_size, model.features.min_samples)
    return [
        {"text": join([o["text"] for o in clip], lf.strategy), "language": clip[0].get("language") if clip else None}
        for clip in outs
    ]


def clip_spans(model, wave: np.ndarray, long_form: LongForm = DEFAULT_LONG_FORM) -> list[tuple[int, int]]:
    """The (start, end) sample ranges of one 16 kHz clip that `transcribe_waves` transcribes with the
    same settings (their texts, in order, joined by `stitch.join`, are its transcript)."""
    return cut_spans(np.asarray(wave), long_form_for(model, long_form), model.features.min_samples)


def transcribe_waves(
    model,
    waves: list[np.ndarray],
    batch_size: int = 16,
    long_form: LongForm = DEFAULT_LONG_FORM,
    stops=None,
    task: Task | None = None,
) -> list[str]:
    """Transcripts of 16 kHz clips of any length: windows sorted by length and batched. `stops`, if
    given, counts the windows whose generation ended on the token budget ("capped") or the loop rule
    ("loops_truncated") rather than on end-of-turn."""
    lf = long_form_for(model, long_form)
    waves = audio.check_clips(waves)  # a bad clip is named before any is transcribed
    run = batch_transcriber(model, stops, task=task)
    return transcribe_long(run, waves, lf, batch_size, model.features.min_samples)


def transcribe_timed(
    model,
    waves: list[np.ndarray],
    batch_size: int = 16,
    long_form: LongForm = DEFAULT_LONG_FORM,
    stops=None,
    task: Task | None = None,
) -> list[dict]:
    """`transcribe_waves` with times: per clip {"text" (the same text), "segments" (the long-form cut's
    segments with their text and words), "words" ({"text", "start", "end", "confidence"}, seconds in the
    recording's clock; start/end None for a word the CTC head could not place)}."""
    lf = long_form_for(model, long_form)
    waves = audio.check_clips(waves)
    run = batch_transcriber(model, stops, timestamps=True, task=task)
    spans, outs = transcribe_windows(run, waves, lf, batch_size, model.features.min_samples)
    return [timed_clip(sp, out, lf.strategy, w) for sp, out, w in zip(spans, outs, waves)]


def transcribe_files(
    model,
    paths: list[str],
    batch_size: int = 16,
    long_form: LongForm = DEFAULT_LONG_FORM,
    max_seconds: float | None = MAX_SECONDS,
) -> list[str]:
    """Transcripts of audio files (any format libsndfile reads, any rate: mixed to mono, resampled)."""
    waves = []
    for p in paths:
        if not Path(p).is_file():
            raise ConfigError(f"no such audio file: {p}")
        waves.append(load_clip(p, p, max_seconds))
    return transcribe_waves(model, waves, batch_size, long_form)
