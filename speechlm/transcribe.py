"""Transcribe audio files with an exported checkpoint.

    python -m speechlm.transcribe -m MODEL_DIR audio.wav [more.flac ...]

Any format libsndfile reads (wav, flac, ogg, mp3), any sample rate or channel count: clips are
mixed to mono and resampled to 16 kHz before the model sees them.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from speechlm import audio
from speechlm.config import ConfigError, cli_errors


def transcribe_files(model, paths: list[str], batch_size: int = 8) -> list[str]:
    waves = []
    for p in paths:
        if not Path(p).is_file():
            raise ConfigError(f"no such audio file: {p}")
        try:
            waves.append(audio.load(p))
        except audio.AudioError as e:
            raise ConfigError(f"{p}: {e}") from None
        limit = model.family.max_seconds
        if limit and len(waves[-1]) > limit * audio.SAMPLE_RATE:
            raise ConfigError(f"{p}: {len(waves[-1]) / audio.SAMPLE_RATE:.1f} s is longer than the {model.family.name} "
                              f"encoder's {limit:g} s limit; split it first")
    out: list[str] = []
    for i in range(0, len(waves), batch_size):
        out.extend(model.transcribe(waves[i : i + batch_size]))
    return out


@cli_errors
def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m speechlm.transcribe", description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("audio", nargs="+")
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args(argv)
    from speechlm.eval import load_model  # the model stack (torch, transformers) once the arguments parse

    missing = [p for p in args.audio if not Path(p).is_file()]
    if missing:  # before the model loads
        raise ConfigError(f"no such audio file: {missing[0]}")
    model = load_model(args.model)
    texts = transcribe_files(model, args.audio, args.batch_size)
    for p, t in zip(args.audio, texts):
        print(f"{p}\t{t}" if len(args.audio) > 1 else t)
        sys.stdout.flush()
    return texts


if __name__ == "__main__":
    main()
