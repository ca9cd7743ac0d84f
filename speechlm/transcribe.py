"""Transcribe audio files of any length with an exported checkpoint.

    python -m speechlm.transcribe -m MODEL_DIR audio.wav [more.flac ...] [--batch-size B]
        [--max-seconds S] [--window-seconds W] [--long-form pause|overlap]

Any format libsndfile reads (wav, flac, ogg, mp3), any sample rate or channel count: clips are
mixed to mono and resampled to 16 kHz before the model sees them. A clip longer than the model's
window (at most the encoder's limit, e.g. Whisper's 30 s) is cut at pauses into windows that are
transcribed together (`speechlm.longform`); `--max-seconds` bounds the longest input accepted.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from speechlm import audio, longform
from speechlm.config import ConfigError, cli_errors

MAX_SECONDS = 4 * 3600.0  # the longest input accepted by default: a long meeting
WINDOW_SECONDS = 20.0  # training clips are capped at 19-20 s (docs/design.md): windows stay in that range


def check_long_form_args(args) -> None:
    """The long-form flags, checked before anything loads."""
    if args.max_seconds < 0:
        raise ConfigError(f"--max-seconds must be >= 0 (0: no limit), got {args.max_seconds:g}")
    if args.window_seconds is not None and args.window_seconds < 1:
        raise ConfigError(f"--window-seconds must be at least 1 s, got {args.window_seconds:g}")


def window_seconds(model, requested: float | None = None) -> float:
    """The window long audio is cut into: the request (default WINDOW_SECONDS), at most the encoder's limit."""
    w = WINDOW_SECONDS if requested is None else float(requested)
    if w <= 0:
        raise ConfigError(f"--window-seconds must be positive, got {requested}")
    limit = model.family.max_seconds
    return min(w, limit) if limit else w


def load_clip(src, name: str, max_seconds: float | None = MAX_SECONDS) -> np.ndarray:
    """16 kHz mono audio of a file path or bytes; a ConfigError naming `name` when it can't be used."""
    try:
        wave = audio.load(src)
    except audio.AudioError as e:
        raise ConfigError(f"{name}: {e}") from None
    if max_seconds and len(wave) > max_seconds * audio.SAMPLE_RATE:
        raise ConfigError(f"{name}: {len(wave) / audio.SAMPLE_RATE:.1f} s is longer than max_seconds "
                          f"({max_seconds:g} s); raise --max-seconds to accept it")
    return wave


def transcribe_waves(model, waves: list[np.ndarray], batch_size: int = 16, window: float | None = None,
                     strategy: str = "pause", overlap_seconds: float = 2.0) -> list[str]:
    """Transcripts of 16 kHz clips of any length: windows sorted by length and batched."""
    return longform.transcribe_long(model.transcribe, waves, window_seconds(model, window), strategy=strategy,
                                    overlap_seconds=overlap_seconds, batch_size=batch_size,
                                    min_samples=model.features.min_samples)


def transcribe_files(model, paths: list[str], batch_size: int = 16, max_seconds: float | None = MAX_SECONDS,
                     window: float | None = None, strategy: str = "pause") -> list[str]:
    waves = []
    for p in paths:
        if not Path(p).is_file():
            raise ConfigError(f"no such audio file: {p}")
        waves.append(load_clip(p, p, max_seconds))
    return transcribe_waves(model, waves, batch_size, window, strategy)


@cli_errors
def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m speechlm.transcribe", description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("audio", nargs="+")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-seconds", type=float, default=MAX_SECONDS, help="longest input accepted (0: no limit)")
    ap.add_argument("--window-seconds", type=float, default=None,
                    help=f"long audio is cut into windows of at most this (default {WINDOW_SECONDS:g}, "
                         "capped at the encoder's limit)")
    ap.add_argument("--long-form", choices=longform.STRATEGIES, default="pause")
    args = ap.parse_args(argv)
    check_long_form_args(args)
    from speechlm.eval import load_model

    missing = [p for p in args.audio if not Path(p).is_file()]
    if missing:  # before the model loads
        raise ConfigError(f"no such audio file: {missing[0]}")
    model = load_model(args.model)
    texts = transcribe_files(model, args.audio, args.batch_size, args.max_seconds, args.window_seconds, args.long_form)
    for p, t in zip(args.audio, texts):
        print(f"{p}\t{t}" if len(args.audio) > 1 else t)
        sys.stdout.flush()
    return texts


if __name__ == "__main__":
    main()
