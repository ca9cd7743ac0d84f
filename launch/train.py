#!/usr/bin/env python
"""Train: `deepspeed launch/train.py --config tiny`, `torchrun --nproc_per_node N launch/train.py ...`
or plain `python launch/train.py ...` (world size 1). Arguments: --config RECIPE, --experiment NAME,
then key.sub=value overrides. Exit codes are documented in speechlm/train/loop.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from speechlm.commands.train import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
