"""`python -m speechlm ...` is the `speechlm` command (what `deepspeed --module speechlm train` and
`torchrun -m speechlm train` run)."""

import sys

from speechlm.commands import main

sys.exit(main())
