"""Transcribe audio files of any length with an exported checkpoint.

    speechlm transcribe -m MODEL_DIR audio.wav [more.flac ...] [--batch-size B]
        [--max-seconds S] [--window-seconds W] [--long-form segments|pause|overlap]
        [--threshold-db 35] [--min-pause-seconds 0.3] [--merge-seconds 0]
        [--format txt|json|srt|vtt] [--out-dir DIR] [--overwrite] [--base decoder=PATH ...]
    ffmpeg -i IN -f s16le -ac 1 -ar 16000 - | speechlm transcribe --live -m MODEL_DIR - [--format txt|jsonl]
    (`python -m speechlm.transcribe` takes the same arguments)

Any format libsndfile reads (wav, flac, ogg, mp3), any sample rate or channel count: clips are
mixed to mono and resampled to 16 kHz before the model sees them. Audio is cut at its pauses into
segments of speech (silence left out; at most the window, itself at most the encoder's limit, e.g.
Whisper's 30 s) that are transcribed together (`speechlm.inference`); `--max-seconds` bounds the
longest input accepted.

Every file that can be transcribed is: one that can't (undecodable, no samples, NaN, an impossible
sample rate, too long) is reported on stderr as `error: FILE: why`, the others go on, and the exit
status is 1 when any failed (docs/reliability.md, "what each input gets").

`--format json|srt|vtt` adds word timestamps from the model's own CTC head (speechlm.model.align):
JSON holds the text, the long-form segments and every word with its start, end (seconds) and
confidence (a word the head could not place has null times); SRT and WebVTT are subtitles of it.
`--live` reads raw PCM (s16le, 16 kHz, mono) from stdin (`-`) or a file as it arrives and prints the
text as a live stream commits it (speechlm.inference.live; never taken back): txt, the words on one
line as they come; `--format jsonl`, one JSON object per committed word ({"word", "start", "end",
"confidence"}, seconds since the input's start; null times for a word the CTC head could not place).

One file per input: beside it (`NAME.json` / `.srt` / `.vtt`), or under `--out-dir` at its path
relative to the inputs' common folder (`a/talk.wav b/talk.wav --out-dir D`: `D/a/talk.srt`,
`D/b/talk.srt`). Nothing is overwritten: two inputs with one output, an output that is an input, an
output that exists (without `--overwrite`) or an `--out-dir` that is a file are errors before any work.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

from speechlm import inference, subtitles
from speechlm.config import ConfigError, cli_errors, command_parser

EXAMPLES = """examples:
  speechlm transcribe -m outputs/RUN clip.wav                        # a run dir means its latest checkpoint
  speechlm transcribe -m outputs/RUN/checkpoints/step-2000 meeting.flac talk.wav --long-form pause
  speechlm transcribe -m user/my-asr clip.wav                        # a Hub id
  speechlm transcribe -m outputs/RUN/final hola.wav --language es --task translate   # pinned, into English
  speechlm transcribe -m outputs/RUN/final part2.wav --prompt "Anna Karenina, Vronsky"   # context, names
  speechlm transcribe -m outputs/RUN/final talk.wav --format srt --out-dir subs   # subtitles from word times
  speechlm transcribe -m copied/step-2000 clip.wav --base decoder=/models/my-decoder   # a local base elsewhere
  ffmpeg -i talk.mp3 -f s16le -ac 1 -ar 16000 - | speechlm transcribe --live -m outputs/RUN/final -   # live
  arecord -f S16_LE -r 16000 -c 1 | speechlm transcribe --live -m outputs/RUN/final - --format jsonl"""

EXIT_SOME_FAILED = 1  # every file that could be transcribed was; the others are named on stderr


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
        choices=("txt", "json", "srt", "vtt", "jsonl"),
        default="txt",
        help="txt prints the text; json, srt and vtt write word timestamps (one file per input); "
        "jsonl (with --live) prints each committed word with its times",
    )
    ap.add_argument(
        "--live",
        action="store_true",
        help="read raw PCM (s16le 16 kHz mono) from AUDIO ('-': stdin) and print text as it is committed",
    )
    ap.add_argument(
        "--out-dir",
        default=None,
        help="where json/srt/vtt files go, at the inputs' paths relative to their common folder "
        "(default: beside each input)",
    )
    ap.add_argument("--overwrite", action="store_true", help="replace json/srt/vtt files that exist (never an input)")
    ap.add_argument(
        "--language", default=None, help="the spoken language, ISO 639-1 (es, de, ...): pinned (default: detected)"
    )
    ap.add_argument(
        "--task",
        default="transcribe",
        help="transcribe (default), translate (into the model's target language: English), or a task of the model's",
    )
    ap.add_argument(
        "--prompt",
        default=None,
        help="context for the model, as OpenAI's prompt (earlier words, names, spellings): it follows the "
        "instruction in the user turn; never changes the task or a pinned language",
    )
    inference.add_long_form_args(ap)
    inference.add_base_args(ap)
    return ap


@cli_errors
def main(argv=None, prog: str = "python -m speechlm.transcribe"):
    args = _parser(prog).parse_args(argv)
    if args.live or args.format == "jsonl":
        return _live(args)
    inference.check_max_seconds(args.max_seconds)
    task = _task(args)
    long_form = inference.long_form_from_args(args)
    bases = inference.bases_from_args(args)
    missing = [p for p in args.audio if not Path(p).is_file()]
    if missing:  # before the model loads
        raise ConfigError(f"no such audio file: {missing[0]}")
    targets = output_paths(args.audio, args.format, args.out_dir, args.overwrite)  # before any work
    inference.local_model(args.model)  # a wrong path fails before any audio is decoded
    waves, failed = {}, {}
    for p in dict.fromkeys(args.audio):
        try:
            waves[p] = inference.load_clip(p, p, args.max_seconds)
        except ConfigError as e:
            failed[p] = _report(p, e)
    results = {}
    if waves:
        model = inference.load_model(args.model, bases)  # the model stack (torch, transformers) once the inputs check
        task = _served(model, task)
        run = inference.transcribe_waves if args.format == "txt" else inference.transcribe_timed
        results, lost = transcribe_each(lambda ws: run(model, ws, args.batch_size, long_form, task=task), waves)
        failed.update({p: _report(p, e) for p, e in lost.items()})
    for p in args.audio:
        if p in results:
            _deliver(p, results[p], args, targets)
    if failed:
        print(f"{len(failed)} of {len(dict.fromkeys(args.audio))} files failed", file=sys.stderr)
        sys.exit(EXIT_SOME_FAILED)
    return [results[p] for p in args.audio]


def _live(args) -> str:
    """`--live`: the input's text, printed as it is committed (module docstring); returns it."""
    if not args.live:
        raise ConfigError("--format jsonl prints a live stream's words: use it with --live")
    if len(args.audio) != 1:
        raise ConfigError("--live reads one input: '-' (stdin) or a raw PCM file")
    if args.format not in ("txt", "jsonl") or args.out_dir is not None:
        raise ConfigError(f"--live prints to stdout as txt or jsonl, not --format {args.format} or --out-dir")
    path = args.audio[0]
    if path != "-" and not Path(path).is_file():
        raise ConfigError(f"no such audio file: {path}")
    task = _task(args)
    bases = inference.bases_from_args(args)
    inference.local_model(args.model)
    model = inference.load_model(args.model, bases)
    task = _served(model, task)
    with open(path, "rb") if path != "-" else contextlib.nullcontext(sys.stdin.buffer) as source:
        try:
            for event in inference.transcribe_live(model, source, asked=task.kwargs()):
                _print_live(event, args.format)
        except ValueError as e:  # the PCM input is cut mid-sample
            raise ConfigError(f"{path}: {e}") from None
    return event.text


def _print_live(event, fmt: str) -> None:
    if fmt == "jsonl":
        for w in event.words:
            print(json.dumps({"word": w["text"], "start": w["start"], "end": w["end"], "confidence": w["confidence"]}))
    else:
        print(event.delta, end="\n" if event.final else "")
    sys.stdout.flush()


def _task(args) -> inference.Task:
    """The language and task of --language and --task, checked before the model loads."""
    if args.language is not None:
        from speechlm import text  # transformers' language table: only when a language is given

        try:
            text.check_language(args.language, "--language")
        except ValueError as e:
            raise ConfigError(str(e)) from None
    if args.task != "transcribe" and args.format != "txt":
        raise ConfigError(
            f"--format {args.format}: word times are for transcription; a {args.task} answer has segment times "
            "only (the server's verbose_json); use --format txt"
        )
    return inference.Task(args.language, args.task, (args.prompt or "").strip() or None)


def _served(model, task: inference.Task) -> inference.Task:
    """`task` as the server asks it of this model: --language one it serves (a ConfigError naming them
    otherwise), and left out for an English-only model (speechlm.inference.fitted)."""
    try:
        return inference.fitted(model, task)
    except ValueError as e:
        raise ConfigError(f"--language: {e}") from None


def _report(path: str, error: Exception) -> str:
    msg = str(error) if str(error).startswith(path) else f"{path}: {error}"
    print(f"error: {msg}", file=sys.stderr)
    sys.stderr.flush()
    return msg


def transcribe_each(run, waves: dict) -> tuple[dict, dict]:
    """({name: result}, {name: error}): every clip in one job; if the job fails, each clip alone, so
    that a clip the model can't take fails alone and the others keep their text."""
    names = list(waves)
    try:
        return dict(zip(names, run([waves[n] for n in names]))), {}
    except (ValueError, RuntimeError) as e:  # torch reports its failures (out of memory too) as RuntimeError
        if len(names) == 1:
            return {}, {names[0]: e}
    results, errors = {}, {}
    for n in names:
        try:
            results[n] = run([waves[n]])[0]
        except (ValueError, RuntimeError) as e:
            errors[n] = e
    return results, errors


def _deliver(path: str, result, args, targets: dict) -> None:
    """Print the text (txt), or write the word-timed file (json, srt, vtt) and print its path."""
    if args.format == "txt":
        print(f"{path}\t{result}" if len(args.audio) > 1 else result)
    else:
        out = targets[path]
        out.parent.mkdir(parents=True, exist_ok=True)
        write = {"json": subtitles.to_json, "srt": subtitles.to_srt, "vtt": subtitles.to_vtt}[args.format]
        # subtitles are lines of words (subtitles.cues: 42 characters, 5 s, a new line after a 1 s pause)
        words = result["words"]
        out.write_text(write(words, result["text"]) if args.format == "json" else write(subtitles.cues(words)))
        print(out)
    sys.stdout.flush()


def output_paths(inputs: list[str], fmt: str, out_dir: str | None, overwrite: bool = False) -> dict[str, Path]:
    """{input: the file its json/srt/vtt goes to} (empty for txt): beside the input, or under `out_dir`
    at its path relative to the inputs' common folder. A ConfigError, before any work, for an
    `out_dir` that is a file, two inputs with one output, an output that is an input, or one that
    exists (unless `overwrite`)."""
    if out_dir is not None and Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise ConfigError(f"--out-dir {out_dir}: a file, not a folder")
    if fmt == "txt":
        return {}
    inputs = list(dict.fromkeys(inputs))
    parents = [Path(p).resolve().parent for p in inputs]
    common = Path(os.path.commonpath(parents))
    targets = {}
    for p, parent in zip(inputs, parents):
        name = Path(p).with_suffix("." + fmt).name
        where = Path(out_dir) / parent.relative_to(common) if out_dir is not None else Path(p).parent
        targets[p] = where / name
    _check_targets(targets, overwrite)
    return targets


def _check_targets(targets: dict[str, Path], overwrite: bool) -> None:
    seen: dict[Path, str] = {}
    given = {Path(p).resolve(): p for p in targets}
    for p, out in targets.items():
        key = out.resolve()
        if key in given:
            raise ConfigError(f"{p}: its output {out} is an input ({given[key]}): rename it or use --out-dir")
        if key in seen:
            raise ConfigError(
                f"{seen[key]} and {p} would both write {out}: transcribe them in separate runs or to separate --out-dir"
            )
        if out.exists() and not overwrite:
            raise ConfigError(f"{out} exists: pass --overwrite to replace it, or choose another --out-dir")
        seen[key] = p


if __name__ == "__main__":
    main()
