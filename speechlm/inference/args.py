"""The long-form flags that `speechlm transcribe`, `speechlm eval` and `speechlm serve` share, and the one
function that turns them into a `LongForm` (a bad value: a ConfigError naming its flag)."""

from __future__ import annotations

import argparse
import math

from speechlm.config import ConfigError
from speechlm.model.longform.settings import DEFAULT_LONG_FORM, OVERLAP_SECONDS, STRATEGIES, WINDOW_SECONDS, LongForm

# LongForm's fields set by a flag, and the flag; the others (the silence kept around speech) keep their
# defaults on the command line
FLAGS = {
    "strategy": "--long-form",
    "window_seconds": "--window-seconds",
    "overlap_seconds": "--overlap-seconds",
    "threshold_db": "--threshold-db",
    "min_pause_seconds": "--min-pause-seconds",
    "merge_seconds": "--merge-seconds",
}
MIN_WINDOW_SECONDS = 1.0  # shorter windows hold too little speech to transcribe


def add_long_form_args(ap: argparse.ArgumentParser) -> None:
    """--window-seconds and the flags choosing how long audio is cut (`LongForm`)."""
    d = DEFAULT_LONG_FORM
    ap.add_argument(
        "--window-seconds",
        type=float,
        default=None,
        help=f"long audio is cut into windows of at most this (default {WINDOW_SECONDS:g}, "
        "capped at the encoder's limit)",
    )
    ap.add_argument(
        "--long-form",
        choices=STRATEGIES,
        default=d.strategy,
        help="segments: a cut in every pause, silence left out; pause: windows cut at their quietest "
        "point; overlap: overlapping windows merged at the seams",
    )
    ap.add_argument(
        "--overlap-seconds",
        type=float,
        default=None,
        help=f"overlap: the audio two neighbouring windows share (default {OVERLAP_SECONDS:g}, or a quarter "
        "of a window shorter than four times that)",
    )
    ap.add_argument(
        "--threshold-db",
        type=float,
        default=d.threshold_db,
        help="segments: a 10 ms frame is silent this far below the recording's loud level",
    )
    ap.add_argument(
        "--min-pause-seconds",
        type=float,
        default=d.min_pause_seconds,
        help="segments: the shortest silence that is a pause (a cut)",
    )
    ap.add_argument(
        "--merge-seconds",
        type=float,
        default=d.merge_seconds,
        help="segments: neighbouring segments merge while they fit this (0: one segment per pause)",
    )


def long_form_from_args(args: argparse.Namespace) -> LongForm:
    """The `LongForm` of the flags of `add_long_form_args`, checked before anything loads: every number
    finite; the overlap, unless given, derived from the window so that any window the flags allow works."""
    given = {
        "strategy": args.long_form,
        "window_seconds": args.window_seconds,
        "overlap_seconds": args.overlap_seconds,
        "threshold_db": args.threshold_db,
        "min_pause_seconds": args.min_pause_seconds,
        "merge_seconds": args.merge_seconds,
    }
    for name, value in given.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{FLAGS[name]} must be a finite number, got {value:g}")
    if args.window_seconds is not None and not args.window_seconds >= MIN_WINDOW_SECONDS:
        raise ConfigError(f"--window-seconds must be at least {MIN_WINDOW_SECONDS:g} s, got {args.window_seconds:g}")
    if given["overlap_seconds"] is None:
        given["overlap_seconds"] = min(OVERLAP_SECONDS, (args.window_seconds or WINDOW_SECONDS) / 4)
    try:
        return LongForm(**{k: v for k, v in given.items() if v is not None})
    except ValueError as e:  # LongForm's message starts with the field's name: say the flag's instead
        name, rest = str(e).split(" ", 1)
        raise ConfigError(f"{FLAGS.get(name, name)} {rest}") from None


def check_max_seconds(max_seconds: float) -> None:
    """--max-seconds of transcribe and eval: 0 means no limit."""
    if not max_seconds >= 0:
        raise ConfigError(f"--max-seconds must be >= 0 (0: no limit), got {max_seconds:g}")
