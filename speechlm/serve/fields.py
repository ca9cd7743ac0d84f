"""The form fields of `POST /v1/audio/transcriptions`, checked one by one; a bad one is a 4xx naming it.

- `file` (required): the audio, any format libsndfile reads.
- `model` (required): one of the served names (`--served-model-name`); another: 404 model_not_found.
- `response_format`: json (default), text, srt, vtt, verbose_json.
- `language` (transcriptions only): absent (the model detects it), or a language of the model's
  `languages` (ISO 639-1 `es`, `es-ES`, or its name `spanish`; a model that lists none serves English
  only): it is pinned, and the answer is in it, never a translation; another: 400 unsupported_language.
- `prompt` (both routes): context for the model, as OpenAI's is for Whisper (earlier words, names,
  spellings; clients fill it with the previous chunk's text). A speech-LLM reads it as text: it follows
  the task's instruction (and the pinned language) in the user turn of the decoder's chat template,
  `...The speech is in Spanish.\nContext: <prompt>` (speechlm.text.task_prompt); only its last 224 tokens
  count, as in OpenAI's API; the template's special tokens and the audio placeholder are taken out of
  it. It never changes the task or the pinned language: the answer stays a transcript in that language.
  A model not trained with context sees an instruction it never saw: leave `prompt` out for it.
- `temperature`: absent or 0 (greedy decoding, what `SpeechLM.transcribe` does); anything else: 400.
- `timestamp_granularities[]`: `segment` is accepted (segments are always in verbose_json, srt and
  vtt); `word` adds `words` ({"word", "start", "end"}; null times for a word the CTC head could not
  place) to verbose_json, and is a 400 with any other response_format, as in OpenAI's API.
- `stream`: absent or false; true: the text as server-sent events while the file is decoded
  (speechlm/serve/live.py), with response_format json or text (the events are OpenAI's either way) and
  no word timestamps; another format or `word`: 400.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.datastructures import FormData, UploadFile

from speechlm import text
from speechlm.serve.errors import APIError
from speechlm.serve.formats import FORMATS

GRANULARITIES = ("segment", "word")


@dataclass
class Fields:
    file: UploadFile
    model: str
    response_format: str
    words: bool = False  # timestamp_granularities[] holds "word"
    stream: bool = False  # stream=true: server-sent events (serve/live.py)
    language: str | None = None  # ISO 639-1, pinned; None: detected
    task: object = None  # the request's speechlm.inference.Task (set by the app); None: plain transcription
    prompt: str | None = None  # OpenAI's prompt: context after the instruction (speechlm.text.task_prompt)


def _value(form: FormData, name: str) -> str | None:
    value = form.get(name)
    if isinstance(value, UploadFile):
        raise APIError(400, f"'{name}' must be a plain form field, not a file", "invalid_value", name)
    return value if value not in (None, "") else None


def _file(form: FormData) -> UploadFile:
    file = form.get("file")
    if file is None:
        raise APIError(400, "missing 'file': send the audio as a multipart/form-data file field", "missing", "file")
    if not isinstance(file, UploadFile):
        raise APIError(400, "'file' must be a file upload, not a text field", "invalid_value", "file")
    return file


def _model(form: FormData, names: list[str]) -> str:
    model = _value(form, "model")
    if model is None:
        raise APIError(400, "missing 'model'", "missing", "model")
    if model not in names:
        msg = f"the model '{model}' does not exist; this server has {', '.join(names)}"
        raise APIError(404, msg, "model_not_found", "model")
    return model


def _response_format(form: FormData) -> str:
    fmt = _value(form, "response_format") or "json"
    if fmt not in FORMATS:
        msg = f"response_format '{fmt}' is not supported; use one of {', '.join(FORMATS)}"
        raise APIError(400, msg, "unsupported_value", "response_format")
    return fmt


def _language(form: FormData, served: list[str]) -> str | None:
    """The pinned language's ISO 639-1 code, or None; `served`: the model's languages."""
    lang = _value(form, "language")
    if lang is None:
        return None
    try:
        return text.language_code(lang, served)
    except ValueError as e:
        raise APIError(400, str(e), "unsupported_language", "language") from None


def _check_temperature(form: FormData) -> None:
    value = _value(form, "temperature")
    if value is None:
        return
    try:
        t = float(value)
    except ValueError:
        raise APIError(400, f"temperature must be a number, got '{value}'", "invalid_value", "temperature") from None
    if t != 0:
        msg = f"temperature {t:g} is not supported: this server decodes greedily (temperature 0) only"
        raise APIError(400, msg, "unsupported_value", "temperature")


def _granularities(form: FormData, response_format: str) -> bool:
    """Whether word timestamps were asked for (only verbose_json carries them)."""
    param = "timestamp_granularities[]"
    asked = form.getlist(param) + form.getlist("timestamp_granularities")
    for g in asked:
        if g not in GRANULARITIES:
            raise APIError(400, f"{param} '{g}' is not one of {', '.join(GRANULARITIES)}", "invalid_value", param)
    if "word" in asked and response_format != "verbose_json":
        msg = f"{param}=word needs response_format=verbose_json (got {response_format})"
        raise APIError(400, msg, "invalid_value", param)
    return "word" in asked


def openapi(names: list[str]) -> dict:
    """The request body of `POST /v1/audio/transcriptions` for the OpenAPI schema (`/openapi.json`, which
    API testers such as Schemathesis read): the fields above, as OpenAI's API documents them."""
    form = {
        "type": "object",
        "required": ["file", "model"],
        "properties": {
            "file": {"type": "string", "format": "binary"},
            "model": {"type": "string", "examples": names},
            "language": {"type": "string"},
            "prompt": {"type": "string"},
            "response_format": {"type": "string", "enum": list(FORMATS)},
            "temperature": {"type": "number"},
            "timestamp_granularities[]": {"type": "array", "items": {"type": "string", "enum": list(GRANULARITIES)}},
            "stream": {"type": "boolean"},
        },
    }
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": form}}}}


def parse(form: FormData, names: list[str], served: list[str] = ("en",), translation: bool = False) -> Fields:
    """The fields of a transcription request, or of a translation (`translation`: OpenAI's translations
    take no language, and a translation has segment times only)."""
    fields = Fields(file=_file(form), model=_model(form, names), response_format=_response_format(form))
    if translation and _value(form, "language") is not None:
        raise APIError(400, "a translation takes no language: the model detects it", "invalid_value", "language")
    fields.language = None if translation else _language(form, list(served))
    fields.prompt = _value(form, "prompt")
    _check_temperature(form)
    fields.words = _granularities(form, fields.response_format)
    if translation and fields.words:
        msg = "word timestamps are for transcriptions; a translation has segment times only"
        raise APIError(400, msg, "invalid_value", "timestamp_granularities[]")
    fields.stream = _stream(form, fields)
    if translation and fields.stream:
        raise APIError(
            400, "stream=true is for transcriptions: a translation comes whole", "unsupported_value", "stream"
        )
    return fields


def _stream(form: FormData, fields: Fields) -> bool:
    value = (_value(form, "stream") or "false").lower()
    if value not in ("true", "1", "false", "0"):
        raise APIError(400, f"stream must be true or false, got '{value}'", "invalid_value", "stream")
    if value in ("false", "0"):
        return False
    if fields.response_format not in ("json", "text") or fields.words:
        asked = fields.response_format + (" with word timestamps" if fields.words else "")
        msg = f"stream=true sends text events: it takes response_format json or text, no word timestamps (got {asked})"
        raise APIError(400, msg, "unsupported_value", "stream")
    return True
