"""Third-party notices that tell a speechlm user nothing, kept out of speechlm's own commands.

transformers' and peft's FutureWarnings (deprecations inside the libraries, e.g. `is_gradient_checkpointing`)
and DeepSpeed's "Setting accelerator to CPU" are filtered; `speechlm --verbose COMMAND` (or
`SPEECHLM_VERBOSE=1`, which launched child processes inherit) shows them. speechlm's own warnings and
every other library warning pass.
"""

from __future__ import annotations

import logging
import os
import warnings

ENV = "SPEECHLM_VERBOSE"
FLAG = "--verbose"
# modules whose FutureWarnings are about their own internals (the `module` a warning is attributed to)
LIBRARIES = r"(transformers|peft|deepspeed|accelerate|torch)(\..*)?$"
# DeepSpeed's logger, and its notice that it found no GPU (it uses the CPU as asked)
DEEPSPEED_LOGGER = "DeepSpeed"
CPU_NOTICE = "Setting accelerator to CPU"


class _DropNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return CPU_NOTICE not in record.getMessage()


def verbose() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def take_flag(argv: list[str]) -> list[str]:
    """argv without `--verbose` (anywhere before a `--`); sets SPEECHLM_VERBOSE when it was there."""
    end = argv.index("--") if "--" in argv else len(argv)
    if FLAG in argv[:end]:
        os.environ[ENV] = "1"
        argv = [a for i, a in enumerate(argv) if not (i < end and a == FLAG)]
    return argv


def install() -> None:
    """Filter the notices (before the libraries are imported), unless verbose."""
    if verbose():
        return
    warnings.filterwarnings("ignore", category=FutureWarning, module=LIBRARIES)
    ds = logging.getLogger(DEEPSPEED_LOGGER)  # the logger DeepSpeed configures on import: same object
    if not any(isinstance(f, _DropNotice) for f in ds.filters):
        ds.addFilter(_DropNotice())
