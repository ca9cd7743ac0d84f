"""Transcribe audio files of any length with an exported checkpoint.

    speechlm transcribe -m MODEL_DIR audio.wav [more.flac ...] [--batch-size B]
        [--max-seconds S] [--window-seconds W] [--long-form segments|pause|overlap]
        [--threshold-db 35] [--min-pause-seconds 0.3] [--merge-seconds 0]
        [--format txt|json|srt|vtt] [--out-dir DIR]
    (`python -m speechlm.transcribe` takes the same arguments)

Any format libsndfile reads (wav, flac, ogg, mp3), any sample rate or channel count: clips are
mixed to mono and resampled to 16 kHz before the model sees them. Audio is cut at its pauses into
segments of speech (silence left out; at most the window, itself at most the encoder's limit, e.g.
Whisper's 30 s) that are transcribed together (`speechlm.inference`); `--max-seconds` bounds the
longest input accepted.

`--format json|srt|vtt` adds word timestamps from the model's own CTC head (speechlm.model.align):
JSON holds the text, the long-form segments and every word with its start, end (seconds) and
confidence (a word the head could not place has null times); SRT and WebVTT are subtitles of it.
One file per input (`--out-dir`, default: beside the audio, `NAME.json` / `.srt` / `.vtt`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from speechlm import inference, subtitles
from speechlm.config import ConfigError, cli_errors, command_parser

EXAMPLES = """examples:
  speechlm transcribe -m outputs/RUN clip.wav                        # a run dir means its latest checkpoint
  speechlm transcribe -m outputs/RUN/checkpoints/step-2000 meeting.flac talk.wav --long-form pause
  speechlm transcribe -m user/my-asr clip.wav                        # a Hub id
  speechlm transcribe -m outputs/RUN/final talk.wav --format srt --out-dir subs   # subtitles from word times"""


def _parser(prog: str) -> argparse.ArgumentParser:
    ap = command_parser(prog, __doc__.split("\n")[0], EXAMPLES)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("audio", nargs="+")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument(
        "--max-seconds", type=float, default=inference.MAX_SECONDS, help="longest input accepted (0: no limit)"
    )
    ap.add_argument(
        "--format",
        choices=("txt", "json", "srt", "vtt"),
        default="txt",
        help="txt prints the text; json, srt and vtt write word timestamps (one file per input)",
    )
    ap.add_argument("--out-dir", default=None, help="where json/srt/vtt files go (default: beside each input)")
    inference.add_long_form_args(ap)
    return ap


@cli_errors
def main(argv=None, prog: str = "python -m speechlm.transcribe"):
    args = _parser(prog).parse_args(argv)
    inference.check_max_seconds(args.max_seconds)
    long_form = inference.long_form_from_args(args)
    missing = [p for p in args.audio if not Path(p).is_file()]
    if missing:  # before the model loads
        raise ConfigError(f"no such audio file: {missing[0]}")
    model = inference.load_model(args.model)  # the model stack (torch, transformers) once the arguments check
    if args.format != "txt":
        return write_timed(model, args, long_form)
    texts = inference.transcribe_files(model, args.audio, args.batch_size, long_form, args.max_seconds)
    for p, t in zip(args.audio, texts):
        print(f"{p}\t{t}" if len(args.audio) > 1 else t)
        sys.stdout.flush()
    return texts


def write_timed(model, args, long_form: inference.LongForm) -> list[dict]:
    """--format json|srt|vtt: word timestamps for every input, one file each; prints the paths."""
    waves = [inference.load_clip(p, p, args.max_seconds) for p in args.audio]
    results = inference.transcribe_timed(model, waves, args.batch_size, long_form)
    write = {"json": subtitles.to_json, "srt": subtitles.to_srt, "vtt": subtitles.to_vtt}[args.format]
    for p, r in zip(args.audio, results):
        out = Path(args.out_dir or Path(p).parent) / (Path(p).stem + "." + args.format)
        out.parent.mkdir(parents=True, exist_ok=True)
        # subtitles are lines of words (subtitles.cues: 42 characters, 5 s, a new line after a 1 s pause)
        out.write_text(write(r["words"], r["text"]) if args.format == "json" else write(subtitles.cues(r["words"])))
        print(out)
    return results


if __name__ == "__main__":
    main()
