"""Inference on clips of any length, shared by `speechlm.transcribe` and `speechlm.eval`: audio
loading with clear errors, the `max_seconds` bound, and windowed, sorted, batched transcription
(`speechlm.longform`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from speechlm import audio, longform
from speechlm.config import ConfigError

MAX_SECONDS = 4 * 3600.0  # the longest input accepted by default: a long meeting
WINDOW_SECONDS = 20.0  # training clips are capped at 19-20 s (docs/design.md): windows stay in that range


def add_long_form_args(ap) -> None:
    """The flags choosing how long audio is cut (`speechlm.longform`), shared by transcribe and eval."""
    ap.add_argument(
        "--long-form",
        choices=longform.STRATEGIES,
        default=longform.DEFAULT_STRATEGY,
        help="segments: a cut in every pause, silence left out; pause: windows cut at their quietest "
        "point; overlap: overlapping windows merged at the seams",
    )
    ap.add_argument(
        "--threshold-db",
        type=float,
        default=longform.THRESHOLD_DB,
        help="segments: a 10 ms frame is silent this far below the recording's loud level",
    )
    ap.add_argument(
        "--min-pause-seconds",
        type=float,
        default=longform.MIN_PAUSE_SECONDS,
        help="segments: the shortest silence that is a pause (a cut)",
    )
    ap.add_argument(
        "--merge-seconds",
        type=float,
        default=longform.MERGE_SECONDS,
        help="segments: neighbouring segments merge while they fit this (0: one segment per pause)",
    )


def long_form_settings(args) -> dict:
    """transcribe_waves' keyword arguments from the flags of `add_long_form_args`."""
    return {
        "strategy": args.long_form,
        "threshold_db": args.threshold_db,
        "min_pause_seconds": args.min_pause_seconds,
        "merge_seconds": args.merge_seconds,
    }


def check_long_form_args(args) -> None:
    """The long-form flags, checked before anything loads."""
    if args.max_seconds < 0:
        raise ConfigError(f"--max-seconds must be >= 0 (0: no limit), got {args.max_seconds:g}")
    if args.window_seconds is not None and args.window_seconds < 1:
        raise ConfigError(f"--window-seconds must be at least 1 s, got {args.window_seconds:g}")
    try:  # longform's own rules (the export runs them too), reported under the flag's name
        longform.check_segment_settings(WINDOW_SECONDS, args.threshold_db, args.min_pause_seconds, args.merge_seconds)
    except ValueError as e:
        name, rest = str(e).split(" ", 1)
        raise ConfigError(f"--{name.replace('_', '-')} {rest}") from None


def window_seconds(model, requested: float | None = None) -> float:
    """The window long audio is cut into: the request (default WINDOW_SECONDS), at most the encoder's limit."""
    w = WINDOW_SECONDS if requested is None else float(requested)
    if w <= 0:
        raise ConfigError(f"--window-seconds must be positive, got {requested}")
    limit = model.family.max_seconds
    return min(w, limit) if limit else w


def load_clip(src, name: str, max_seconds: float | None = MAX_SECONDS) -> np.ndarray:
    """16 kHz mono audio of a file path, bytes or an already decoded 16 kHz array (the shard reader's);
    a ConfigError naming `name` when it can't be used."""
    try:
        wave = src if isinstance(src, np.ndarray) else audio.load(src)
    except audio.AudioError as e:
        raise ConfigError(f"{name}: {e}") from None
    if max_seconds and len(wave) > max_seconds * audio.SAMPLE_RATE:
        raise ConfigError(
            f"{name}: {len(wave) / audio.SAMPLE_RATE:.1f} s is longer than max_seconds "
            f"({max_seconds:g} s); raise --max-seconds to accept it"
        )
    return wave


def batch_transcriber(model, stops: dict | None = None, timestamps: bool = False) -> Callable[[list[np.ndarray]], list]:
    """The texts of one batch of windows (`SpeechLM.transcribe`), as `transcribe_waves` batches them
    (with `timestamps`, dicts with the text and its words); `stops`, if given, counts the windows whose
    generation ended on the token budget ("capped") or the loop rule ("loops_truncated") rather than on
    end-of-turn."""

    def batch(ws: list[np.ndarray]) -> list:
        outs = model.transcribe(ws, details=True, timestamps=timestamps)
        if stops is not None:
            stops["capped"] = stops.get("capped", 0) + sum(bool(o["capped"]) for o in outs)
            stops["loops_truncated"] = stops.get("loops_truncated", 0) + sum(bool(o["loop"]) for o in outs)
        return outs if timestamps else [o["text"] for o in outs]

    return batch


def clip_spans(
    model,
    wave: np.ndarray,
    window: float | None = None,
    strategy: str = longform.DEFAULT_STRATEGY,
    overlap_seconds: float = 2.0,
    threshold_db: float = longform.THRESHOLD_DB,
    min_pause_seconds: float = longform.MIN_PAUSE_SECONDS,
    merge_seconds: float = longform.MERGE_SECONDS,
) -> list[tuple[int, int]]:
    """The (start, end) sample ranges of one 16 kHz clip that `transcribe_waves` transcribes with the
    same settings (their texts, in order, joined by `longform.join`, are its transcript)."""
    return longform.clip_spans(
        np.asarray(wave),
        strategy,
        window_seconds(model, window),
        overlap_seconds,
        model.features.min_samples,
        threshold_db,
        min_pause_seconds,
        merge_seconds,
    )


def transcribe_waves(
    model,
    waves: list[np.ndarray],
    batch_size: int = 16,
    window: float | None = None,
    strategy: str = longform.DEFAULT_STRATEGY,
    overlap_seconds: float = 2.0,
    stops: dict | None = None,
    threshold_db: float = longform.THRESHOLD_DB,
    min_pause_seconds: float = longform.MIN_PAUSE_SECONDS,
    merge_seconds: float = longform.MERGE_SECONDS,
) -> list[str]:
    """Transcripts of 16 kHz clips of any length: windows sorted by length and batched. `stops`, if
    given, counts the windows whose generation ended on the token budget ("capped") or the loop rule
    ("loops_truncated") rather than on end-of-turn. The last three settings are `"segments"`'
    (`speechlm.longform.segment_windows`)."""
    return longform.transcribe_long(
        batch_transcriber(model, stops),
        waves,
        window_seconds(model, window),
        strategy=strategy,
        overlap_seconds=overlap_seconds,
        batch_size=batch_size,
        min_samples=model.features.min_samples,
        threshold_db=threshold_db,
        min_pause_seconds=min_pause_seconds,
        merge_seconds=merge_seconds,
    )


def transcribe_timed(
    model,
    waves: list[np.ndarray],
    batch_size: int = 16,
    window: float | None = None,
    strategy: str = longform.DEFAULT_STRATEGY,
    stops: dict | None = None,
    **cut,
) -> list[dict]:
    """`transcribe_waves` with times: per clip {"text" (the same text), "segments" (the long-form cut's
    segments with their text and words), "words" ({"text", "start", "end", "confidence"}, seconds in the
    recording's clock; start/end None for a word the CTC head could not place)}. `cut`: overlap_seconds
    and the `"segments"` settings, as `transcribe_waves` takes them."""
    spans, outs = longform.transcribe_windows(
        batch_transcriber(model, stops, timestamps=True),
        waves,
        window_seconds(model, window),
        strategy,
        batch_size=batch_size,
        min_samples=model.features.min_samples,
        **cut,
    )
    return [longform.timed_clip(sp, out, strategy, w) for sp, out, w in zip(spans, outs, waves)]
