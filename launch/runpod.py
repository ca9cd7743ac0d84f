#!/usr/bin/env python
"""`python launch/runpod.py ...` from a checkout: the same commands as `speechlm runpod ...`
(the code is speechlm/runpod/)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from speechlm.commands.runpod import main  # noqa: E402
from speechlm.runpod import *  # noqa: E402, F403  (`import runpod` with launch/ on the path: the same names)

if __name__ == "__main__":
    sys.exit(main(prog="launch/runpod.py"))
