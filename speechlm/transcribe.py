"""`python -m speechlm.transcribe` is `speechlm transcribe`: the command is speechlm/commands/transcribe.py.

An alias, run by name as `python -m` runs a module, so that nothing below the commands imports one
(tests/test_imports.py holds every such alias to these three lines)."""

import runpy

runpy.run_module("speechlm.commands.transcribe", run_name="__main__", alter_sys=True)
