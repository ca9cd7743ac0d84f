"""The transcription in each `response_format` of OpenAI's API: json, text, srt, vtt, verbose_json.

Segment times are the long-form cut's ranges (`speechlm.model.longform.stitch.timed_texts`): one subtitle per segment
of speech the model transcribed. SubRip and WebVTT are written here (a timestamp and a blank line
each); tests/serve/test_serve.py reads them back with the `srt` and `webvtt-py` libraries.
"""

from __future__ import annotations

import math

from fastapi.responses import JSONResponse, PlainTextResponse, Response

FORMATS = ("json", "text", "srt", "vtt", "verbose_json")


def _clock(seconds: float, sep: str) -> str:
    ms = round(seconds * 1000)
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def srt(segments: list[dict]) -> str:
    cues = [
        f"{i}\n{_clock(s['start'], ',')} --> {_clock(s['end'], ',')}\n{s['text']}\n"
        for i, s in enumerate(segments, start=1)
    ]
    return "\n".join(cues)


def vtt(segments: list[dict]) -> str:
    cues = [f"{_clock(s['start'], '.')} --> {_clock(s['end'], '.')}\n{s['text']}\n" for s in segments]
    return "WEBVTT\n\n" + "\n".join(cues)


def render(
    fmt: str,
    text: str,
    segments: list[dict],
    duration: float,
    words: list[dict] | None = None,
    task: str = "transcribe",
    language: str = "english",
) -> Response:
    """The answer in `fmt`; verbose_json names the `task` and the spoken `language` (OpenAI writes its name)."""
    usage = {"type": "duration", "seconds": math.ceil(duration)}
    if fmt == "json":
        return JSONResponse({"text": text, "usage": usage})
    if fmt == "text":
        return PlainTextResponse(text)
    if fmt == "srt":
        return PlainTextResponse(srt(segments), media_type="application/x-subrip")
    if fmt == "vtt":
        return PlainTextResponse(vtt(segments), media_type="text/vtt")
    if fmt == "verbose_json":
        return JSONResponse(
            {
                "task": task,
                "language": language,
                "duration": round(duration, 3),
                "text": text,
                "segments": [
                    {"id": i, "start": round(s["start"], 3), "end": round(s["end"], 3), "text": s["text"]}
                    for i, s in enumerate(segments)
                ],
                **(
                    {"words": [{"word": w["text"], "start": w["start"], "end": w["end"]} for w in words]}
                    if words is not None
                    else {}
                ),
                "usage": usage,
            }
        )
    raise ValueError(f"response_format must be one of {FORMATS}, got {fmt!r}")
