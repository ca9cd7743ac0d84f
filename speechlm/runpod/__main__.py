"""`python -m speechlm.runpod ...`: the same commands as `speechlm runpod ...`."""

import sys

from speechlm.runpod import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m speechlm.runpod"))
