"""`python -m speechlm.eval` is `speechlm eval`: the command is speechlm/commands/eval.py.

An alias, run by name as `python -m` runs a module, so that nothing below the commands imports one
(tests/test_imports.py holds every such alias to these three lines)."""

import runpy

runpy.run_module("speechlm.commands.eval", run_name="__main__", alter_sys=True)
