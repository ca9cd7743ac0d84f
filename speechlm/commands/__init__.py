"""The `speechlm` command: one subcommand per job, each in its own module here (speechlm/commands/X.py
for `speechlm X`), handed its arguments as `main(argv, prog)`.

A command module parses arguments and prints; the work is the library's (speechlm.train,
speechlm.inference, ...), and no library module imports a command (tests/test_imports.py). This
module is nothing but dispatch: a command is imported only when it runs, so `speechlm --help` stays
fast; `speechlm X --help` prints module X's own help.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from speechlm import quiet

# name -> one line for `speechlm --help`; the command is speechlm/commands/<name>.py, whose
# main(argv, prog) parses the arguments and prints what the library returns
COMMANDS = {
    "train": "train a speech-LLM (alone, or under torchrun or deepspeed)",
    "shard": "build WebDataset shards from a data recipe",
    "eval": "word error rate of a checkpoint on test sets",
    "transcribe": "transcribe audio files of any length",
    "plan": "size a run: parameters, GPU memory, disk, GPUs that fit",
    "report": "plots of a training run from its metrics.jsonl",
    "demo": "the offline demo: shards, weights, CPU training, WER",
    "export": "write the self-contained model folder of a checkpoint",
    "runpod": "train on a rented GPU: plan, up, deploy, train, ...",
    "serve": "serve a model behind OpenAI's transcription API",
    "model": "parameter counts per part of a model (--count)",
}


def module_of(name: str) -> str:
    return f"{__name__}.{name}"


EXAMPLES = """examples:
  speechlm demo                                     # the offline demo, end to end on CPU
  speechlm plan --experiment free_run               # will it fit? which GPU?
  speechlm train --config tiny                      # train (see `speechlm train --help` for torchrun, deepspeed)
  speechlm eval -m outputs/RUN -d librispeech -n 20
  speechlm runpod plan                              # then: up, wait, deploy, train, attach, checkpoint, down

`speechlm COMMAND --help` shows each command's options and examples; `speechlm --verbose COMMAND` also
shows the libraries' own notices (deprecation warnings, DeepSpeed's device notice)."""

# deepspeed's launcher puts --local_rank=N right after the program (`speechlm --local_rank=0 train ...`)
LOCAL_RANK = ("--local_rank", "--local-rank")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="speechlm",
        description="Train, evaluate and ship speech-LLMs for ASR.",
        epilog=EXAMPLES,
        formatter_class=lambda prog: argparse.RawDescriptionHelpFormatter(prog, max_help_position=20),
    )
    ap.add_argument(quiet.FLAG, action="store_true", help="show the libraries' own notices too (speechlm.quiet)")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, help_ in COMMANDS.items():
        sub.add_parser(name, help=help_, add_help=False)
    return ap


def split_local_rank(argv: list[str]) -> tuple[list[str], list[str]]:
    """The leading --local_rank option(s) a launcher added, and the rest."""
    lead = []
    while argv and argv[0].split("=", 1)[0] in LOCAL_RANK:
        n = 1 if "=" in argv[0] else 2
        lead, argv = lead + argv[:n], argv[n:]
    return lead, argv


def main(argv: list[str] | None = None) -> int:
    argv = quiet.take_flag(list(sys.argv[1:] if argv is None else argv))
    quiet.install()  # before any library is imported: their notices (speechlm.quiet); --verbose shows them
    local_rank, argv = split_local_rank(argv)
    if not argv or argv[0] not in COMMANDS:
        parser().parse_args(argv)  # --help, or argparse's message for a missing/unknown command (exit 2)
        return 2
    name, rest = argv[0], argv[1:]
    module = importlib.import_module(module_of(name))
    rc = module.main(rest + local_rank, prog=f"speechlm {name}")
    return rc if isinstance(rc, int) else 0  # some mains return their results (a list, a dict)


if __name__ == "__main__":
    sys.exit(main())
