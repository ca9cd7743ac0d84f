"""Size a run before paying for it: parameters, GPU memory per device, disk, GPUs that fit.

    speechlm plan [--config C] [--experiment E] [--world-size N] [--json] [key=value ...]
    (`python -m speechlm.plan` takes the same arguments)

The memory and disk model: speechlm.plan.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from speechlm.config import Config, cli_errors, command_parser, load

EXAMPLES = """examples:
  speechlm plan                                     # the production recipe on one GPU
  speechlm plan --experiment free_run
  speechlm plan --config small --world-size 8 training.per_device_train_batch_size=16
  speechlm plan --json > plan.json"""


def build_parser(prog: str = "python -m speechlm.plan") -> argparse.ArgumentParser:
    ap = command_parser(prog, __doc__.splitlines()[0], EXAMPLES)
    add_plan_args(ap)
    return ap


def add_plan_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--config", default=None, help="recipe name or YAML path (default: production)")
    ap.add_argument("--experiment", "-e", default=None)
    ap.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", "1")))
    ap.add_argument("--json", action="store_true", help="print the plan as JSON")
    ap.add_argument("overrides", nargs="*", help="key.sub=value")


@cli_errors
def main(argv: list[str] | None = None, prog: str = "python -m speechlm.plan") -> int:
    args = build_parser(prog).parse_args(argv)
    cfg = load(Config, args.config, args.experiment, args.overrides)
    from speechlm.plan import make_plan, report  # the model stack (torch) once the arguments parse

    plan = make_plan(cfg, world=args.world_size)
    print(json.dumps(plan, indent=1) if args.json else report(plan))
    return 0


if __name__ == "__main__":
    sys.exit(main())
