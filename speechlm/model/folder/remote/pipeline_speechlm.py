"""transformers pipeline of a speechlm export:

    asr = pipeline("automatic-speech-recognition", model=folder, trust_remote_code=True)
    asr("meeting.flac")["text"]; asr(wave_16k)["text"]; asr({"raw": wave, "sampling_rate": 44100})
    asr([clip1, clip2, ...], batch_size=16)   # all windows of all clips transcribed as one sorted job
    asr("talk.flac", return_timestamps="word")["chunks"]  # [{"text", "timestamp": (start_s, end_s)}, ...]
    asr("talk.flac", return_timestamps=True)["chunks"]    # the same for the long-form cut's segments
    asr("hola.flac", generate_kwargs={"language": "es"})  # pinned: answered in Spanish, never translated
    asr("hola.flac", generate_kwargs={"language": "spanish", "task": "translate"})  # into English

`generate_kwargs` takes what Whisper's pipeline takes for these: `language` (ISO 639-1 `es`, `es-ES`, its
English name or Whisper's `<|es|>`; one the model lists; none: the model detects it), `task` (transcribe,
translate, or a task of the model's own) and `max_new_tokens`, and `prompt`: context as text (earlier
words, names, spellings; Whisper's takes it as `prompt_ids`); any other key is refused by name (this
model decodes greedily, with its own stopping rules).

Audio of any length: cut at its pauses into segments of speech, silence left out, none longer than
the window (speechlm_longform.py, the module `speechlm transcribe` uses, with its defaults; the keywords
`strategy`, `window_seconds`, `threshold_db`, `min_pause_seconds`, `merge_seconds` and the other fields
of its `LongForm` change them).
Files are decoded with soundfile; other sample rates resampled with soxr (both optional: pass 16 kHz
arrays without them). Every input is checked as speechlm checks it (speechlm_audio_checks.py): an
impossible sample rate or channel count, no samples or NaN/inf samples are refused with an AudioError
(a ValueError) naming the input; a clip shorter than the encoder's smallest input is padded with silence.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
from transformers import Pipeline

from .speechlm_audio_checks import SAMPLE_RATE, AudioError, check_clip, prepare
from .speechlm_longform import LongForm

# keywords passed on to SpeechLMForASR.transcribe (the long-form cut and the token budget)
FORWARD_KEYS = ("max_new_tokens", *(f.name for f in fields(LongForm)))
# Whisper's pipeline's generate_kwargs this model takes (SpeechLMForASR.transcribe's language and task; its
# prompt as text, where Whisper's takes `prompt_ids`)
GENERATE_KEYS = ("language", "task", "prompt", "max_new_tokens")


def _generate_kwargs(generate_kwargs: dict | None) -> dict:
    """`generate_kwargs`' language, task, prompt and max_new_tokens; ValueError naming any other key."""
    given = dict(generate_kwargs or {})
    other = sorted(set(given) - set(GENERATE_KEYS))
    if other:
        raise ValueError(
            f"generate_kwargs {', '.join(other)}: not taken by this model (it takes {', '.join(GENERATE_KEYS)})"
        )
    return {k: v for k, v in given.items() if v is not None}


def _to_16k(wave, sr: int, name: str) -> np.ndarray:
    """Decoded samples -> 16 kHz mono, through the checks speechlm itself runs (speechlm_audio_checks.py:
    an impossible format, no samples or non-finite ones refused with an AudioError naming `name`; float
    samples beyond full scale scaled down and cancelling channels replaced by the loudest, with a warning)."""
    wave = np.asarray(wave, dtype=np.float32)
    if wave.ndim == 2 and wave.shape[1] > 8:  # [channels, n] as an array library may give it
        wave = wave.T
    wave = prepare(wave, sr, name)
    if sr != SAMPLE_RATE:
        try:
            import soxr
        except ImportError:
            raise ImportError(f"{sr} Hz audio needs resampling to 16 kHz: pip install soxr") from None
        wave = soxr.resample(wave, sr, SAMPLE_RATE, quality="HQ")
    return check_clip(wave, name)


def load_audio(item, name: str = "audio") -> np.ndarray:
    """A path, bytes, a 16 kHz array, or {"raw"|"array": samples, "sampling_rate": sr} -> 16 kHz mono."""
    if isinstance(item, dict):
        samples = item.get("raw", item.get("array"))
        if samples is None or "sampling_rate" not in item:
            raise ValueError('an audio dict needs "raw" (or "array") and "sampling_rate"')
        return _to_16k(samples, int(item["sampling_rate"]), name)
    if isinstance(item, (str, bytes, bytearray)):
        import io

        try:
            import soundfile
        except ImportError:
            raise ImportError("reading audio files needs soundfile: pip install soundfile") from None
        src = io.BytesIO(bytes(item)) if isinstance(item, (bytes, bytearray)) else item
        what = item if isinstance(item, str) else f"({len(item)} bytes)"
        try:
            wave, sr = soundfile.read(src, dtype="float32", always_2d=False)
        except Exception as e:  # soundfile's errors vary by libsndfile version
            raise AudioError(f"cannot decode audio {what}: {e}") from None
        return _to_16k(wave, sr, what if isinstance(item, str) else name)
    return _to_16k(item, SAMPLE_RATE, name)


class SpeechLMASRPipeline(Pipeline):
    _load_tokenizer = False  # the model holds its tokenizer
    _load_feature_extractor = False  # and its family's features
    _load_image_processor = False
    _load_processor = False

    def _sanitize_parameters(self, return_timestamps=None, generate_kwargs=None, **kwargs):
        # transformers' convention: "word" -> word chunks, True -> segment chunks, each {"text", "timestamp"}
        if return_timestamps not in (None, False, True, "word"):
            raise ValueError(f"return_timestamps must be True, 'word' or None, got {return_timestamps!r}")
        forward = {k: kwargs[k] for k in FORWARD_KEYS if kwargs.get(k) is not None}
        forward.update(_generate_kwargs(generate_kwargs))
        if return_timestamps == "word" and forward.get("task", "transcribe") != "transcribe":
            raise ValueError(f"return_timestamps='word' is for transcription; a {forward['task']} has segment times")
        if return_timestamps:
            forward["timestamps"] = True
        return {}, forward, {"return_timestamps": return_timestamps}

    def preprocess(self, inputs):
        return {"wave": load_audio(inputs)}

    def _forward(self, model_inputs, **params):
        return {"result": self.model.transcribe([model_inputs["wave"]], **params)[0]}

    def postprocess(self, model_outputs, return_timestamps=None):
        return _output(model_outputs["result"], return_timestamps)

    def __call__(self, inputs, batch_size: int = 16, **kwargs):
        """One input -> {"text"}; a list -> a list of them, every window of every clip in one sorted batched job."""
        if not isinstance(inputs, (list, tuple)):
            return super().__call__(inputs, **kwargs)
        _, forward, post = self._sanitize_parameters(**kwargs)
        waves = [load_audio(x, x if isinstance(x, str) else f"input {i}") for i, x in enumerate(inputs)]
        results = self.model.transcribe(waves, batch_size=batch_size, **forward)
        return [_output(r, post["return_timestamps"]) for r in results]


def _output(result, return_timestamps) -> dict:
    """The pipeline's answer: {"text"}, plus "chunks" of words ("word") or of segments (True)."""
    if not return_timestamps:
        return {"text": result}
    items = result["words"] if return_timestamps == "word" else result["segments"]
    return {"text": result["text"], "chunks": [{"text": i["text"], "timestamp": (i["start"], i["end"])} for i in items]}
