"""`python -m speechlm ...` is the `speechlm` command (what `deepspeed --module speechlm train` and
`torchrun -m speechlm train` run)."""

import sys

from speechlm.cli import main

sys.exit(main())
