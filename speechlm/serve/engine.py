"""The server's model side, all through speechlm.inference (the API `speechlm transcribe` calls): the
model it loads, the audio decoding it does, its long-form cut, its batch function and its join.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from speechlm.inference import (
    DEFAULT_LONG_FORM,
    SAMPLE_RATE,
    LongForm,
    Task,
    batch_transcriber,
    clip_spans,
    served,
    timed_clip,
)
from speechlm.serve import decode as bounded
from speechlm.serve.decode import BadAudio, TooLong

__all__ = ["SAMPLE_RATE", "BadAudio", "Engine", "TooLong"]


class Engine:
    """A loaded model and the cut that `speechlm transcribe` would make with the same settings."""

    def __init__(self, model, long_form: LongForm = DEFAULT_LONG_FORM):
        self.model = model
        self.long_form = long_form
        self._plain = batch_transcriber(model)
        self._timed = batch_transcriber(model, timestamps=True)
        self.cut(np.zeros(SAMPLE_RATE, np.float32))  # bad settings fail at start-up, not on the first request

    @property
    def languages(self) -> list[str]:
        """The languages the model serves (its `languages` setting; a model that lists none: English)."""
        return served(self.model)

    @property
    def multilingual(self) -> bool:
        """Whether the model lists its languages; one that does not was trained on English prompts with no
        language stated, so English asked of it is answered exactly as no language is."""
        return bool(getattr(self.model.cfg, "languages", None))

    def transcribe_batch(
        self, segments: list[np.ndarray], words: bool = False, prefixes=None, tasks: list | None = None
    ) -> list[dict]:
        """{"text"} per segment, with its "words" when a request in the batch asked for them: the CTC head's
        times cost ~14% of a batch (docs/benchmarks.md), paid only then; the texts are the same.
        `prefixes`: per segment, the text its answer starts with (live streams' windows, "" for none:
        `SpeechLM.transcribe(prefixes=...)`, whose answer with no prefix is the one without). `tasks`: per
        segment its request's language and task (speechlm.inference.Task or None); then each dict also
        says the "language" the model named (or the pinned one)."""
        if prefixes is not None or tasks is not None:
            kwargs = {"prefixes": list(prefixes)} if prefixes is not None else {}
            if tasks is not None:
                tasks = [t or Task() for t in tasks]
                kwargs.update(language=[t.language for t in tasks], task=[t.task for t in tasks])
                if any(t.context for t in tasks):
                    kwargs["context"] = [t.context for t in tasks]
            outs = self.model.transcribe(segments, details=True, timestamps=words, **kwargs)
            return [{k: o[k] for k in ("text", "words", "language") if k in o} for o in outs] if tasks else outs
        if words:
            return self._timed(segments)
        return [{"text": t} for t in self._plain(segments)]

    def usage(self, samples: int, text: str) -> dict:
        """OpenAI's token usage of a streamed transcription: the `<audio>` tokens of its audio in, the
        tokens of its text out (`transcript.text.done`'s and the realtime `completed` event's `usage`)."""
        m = self.model
        audio = int(m.family.audio_token_count(samples, m.cfg.projector_pool_stride)) if samples else 0
        out = len(m.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0
        return {
            "type": "tokens",
            "input_tokens": audio,
            "output_tokens": out,
            "total_tokens": audio + out,
            "input_token_details": {"audio_tokens": audio, "text_tokens": 0},
        }

    @classmethod
    def load(cls, path: str, long_form: LongForm = DEFAULT_LONG_FORM, bases: dict | None = None) -> Engine:
        """Whatever `speechlm transcribe -m` takes: an export folder, a checkpoint, a run dir, a Hub id
        (`bases`: the `--base` flags, speechlm.inference.bases)."""
        from speechlm.inference import load_model  # torch and transformers, once the arguments are checked

        return cls(load_model(path, bases), long_form)

    @staticmethod
    def default_name(path: str) -> str:
        """The model name clients send: the folder's name (a Hub id as given)."""
        p = Path(path)
        return path if not p.exists() else p.resolve().name

    def decode(self, data: bytes, max_seconds: float) -> np.ndarray:
        """16 kHz mono float32 samples of an uploaded file, the samples `transcribe` decodes from it, with
        its header checked first and at most `max_seconds` decoded (`serve/decode.py`)."""
        return bounded.decode(data, max_seconds)

    def cut(self, wave: np.ndarray) -> list[tuple[int, int]]:
        """The (start, end) sample ranges `transcribe` transcribes of this clip."""
        return clip_spans(self.model, wave, self.long_form)

    def timed(self, spans: list[tuple[int, int]], outs: list[dict], wave: np.ndarray) -> dict:
        """{"text" (joined as transcribe joins), "segments", "words"} of one request's segments' results."""
        return timed_clip(spans, outs, self.long_form.strategy, wave)
