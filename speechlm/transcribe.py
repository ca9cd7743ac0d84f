"""Transcribe audio files of any length with an exported checkpoint.

    speechlm transcribe -m MODEL_DIR audio.wav [more.flac ...] [--batch-size B]
        [--max-seconds S] [--window-seconds W] [--long-form segments|pause|overlap]
        [--threshold-db 35] [--min-pause-seconds 0.3] [--merge-seconds 0]
    (`python -m speechlm.transcribe` takes the same arguments)

Any format libsndfile reads (wav, flac, ogg, mp3), any sample rate or channel count: clips are
mixed to mono and resampled to 16 kHz before the model sees them. Audio is cut at its pauses into
segments of speech (silence left out; at most the window, itself at most the encoder's limit, e.g.
Whisper's 30 s) that are transcribed together (`speechlm.longform`); `--max-seconds` bounds the
longest input accepted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from speechlm import longform
from speechlm.config import ConfigError, cli_errors
from speechlm.inference import (
    MAX_SECONDS,
    WINDOW_SECONDS,
    add_long_form_args,
    check_long_form_args,
    load_clip,
    long_form_settings,
    transcribe_waves,
)

EXAMPLES = """examples:
  speechlm transcribe -m outputs/RUN clip.wav                        # a run dir means its latest checkpoint
  speechlm transcribe -m outputs/RUN/checkpoints/step-2000 meeting.flac talk.wav --long-form pause
  speechlm transcribe -m user/my-asr clip.wav                        # a Hub id"""


def transcribe_files(
    model,
    paths: list[str],
    batch_size: int = 16,
    max_seconds: float | None = MAX_SECONDS,
    window: float | None = None,
    strategy: str = longform.DEFAULT_STRATEGY,
    **segment_settings,
) -> list[str]:
    """Transcripts of audio files; `segment_settings`: threshold_db, min_pause_seconds, merge_seconds."""
    waves = []
    for p in paths:
        if not Path(p).is_file():
            raise ConfigError(f"no such audio file: {p}")
        waves.append(load_clip(p, p, max_seconds))
    return transcribe_waves(model, waves, batch_size, window, strategy, **segment_settings)


@cli_errors
def main(argv=None, prog: str = "python -m speechlm.transcribe"):
    ap = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.split("\n")[0],
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("audio", nargs="+")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-seconds", type=float, default=MAX_SECONDS, help="longest input accepted (0: no limit)")
    ap.add_argument(
        "--window-seconds",
        type=float,
        default=None,
        help=f"long audio is cut into windows of at most this (default {WINDOW_SECONDS:g}, "
        "capped at the encoder's limit)",
    )
    add_long_form_args(ap)
    args = ap.parse_args(argv)
    check_long_form_args(args)
    from speechlm.eval import load_model  # the model stack (torch, transformers) once the arguments parse

    missing = [p for p in args.audio if not Path(p).is_file()]
    if missing:  # before the model loads
        raise ConfigError(f"no such audio file: {missing[0]}")
    model = load_model(args.model)
    texts = transcribe_files(
        model, args.audio, args.batch_size, args.max_seconds, args.window_seconds, **long_form_settings(args)
    )
    for p, t in zip(args.audio, texts):
        print(f"{p}\t{t}" if len(args.audio) > 1 else t)
        sys.stdout.flush()
    return texts


if __name__ == "__main__":
    main()
