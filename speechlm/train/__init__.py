"""DeepSpeed ZeRO trainer: `main(argv)` is what `launch/train.py` runs (see loop.py for exit codes)."""

from __future__ import annotations

import argparse

from speechlm import config as config_mod
from speechlm.config import Config


def parse_args(argv):
    p = argparse.ArgumentParser(prog="launch/train.py", description="Train a speech-LLM (DeepSpeed ZeRO).")
    p.add_argument("--config", default="production", help="recipe file or shipped name (production, tiny)")
    p.add_argument("--experiment", default=None, help="overlay recipes/experiments/NAME.yaml")
    p.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)  # deepspeed adds it
    p.add_argument("overrides", nargs="*", help="key.sub=value")
    return p.parse_args(argv)


@config_mod.cli_errors
def main(argv=None) -> int:
    args = parse_args(argv)
    cfg = config_mod.load(Config, args.config, args.experiment, args.overrides)
    from speechlm.train.loop import Trainer  # the loop pulls deepspeed: `speechlm.train.x` stays light

    return Trainer(cfg).run()


__all__ = ["main", "parse_args"]
