"""`speechlm train`: a run of the DeepSpeed ZeRO trainer (speechlm.train.loop, with its exit codes), as
`launch/train.py` and the launchers run it."""

from __future__ import annotations

import argparse
import sys

from speechlm import config as config_mod
from speechlm.config import Config, command_parser

EXAMPLES = """examples:
  speechlm train --config tiny                      # CPU rehearsal on the synthetic corpus (world size 1)
  speechlm train --experiment free_run              # one GPU
  speechlm train --config production data.train.0.path=s3://bucket/loquacious_small training.max_steps=2000
  speechlm train --config demo model.init_from=outputs/demo/final training.run_name=mine   # fine-tune a trained model
  (a run folder that holds a run resumes it when the config is the same, else stops: --overwrite starts over)

launchers (each runs this same loop; plain `speechlm train` is one process):
  torchrun --nproc_per_node 8 --no-python speechlm train --config production
  torchrun --nproc_per_node 8 -m speechlm train --config production   # no `speechlm` on the PATH needed
  deepspeed --no_python speechlm train --config production
  deepspeed --module speechlm train --config production
  NNODES=2 NODE_RANK=0 MASTER_ADDR=host0 launch/torchrun.sh --config production   # multi-node
  sbatch slurm/train.sh --config production
  deepspeed launch/train.py --config production     # the script form works as before

exit codes: speechlm/train/loop.py"""


def parse_args(argv, prog: str = "launch/train.py"):
    p = command_parser(prog, "Train a speech-LLM (DeepSpeed ZeRO).", EXAMPLES)
    p.add_argument("--config", default="production", help="recipe file or shipped name (production, tiny)")
    p.add_argument("--experiment", default=None, help="overlay recipes/experiments/NAME.yaml")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="start over in a run folder that holds another run (deletes its checkpoints, final/, eval/, logs)",
    )
    p.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)  # deepspeed adds it
    p.add_argument("overrides", nargs="*", help="key.sub=value")
    return p.parse_args(argv)


@config_mod.cli_errors
def main(argv=None, prog: str = "launch/train.py") -> int:
    args = parse_args(argv, prog)
    cfg = config_mod.load(Config, args.config, args.experiment, args.overrides)
    from speechlm.train.loop import Trainer  # the loop pulls deepspeed: `speechlm.train.x` stays light

    return Trainer(cfg, overwrite=args.overwrite).run()


__all__ = ["main", "parse_args"]


if __name__ == "__main__":
    sys.exit(main())
