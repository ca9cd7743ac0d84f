"""`python -m speechlm.serve` is `speechlm serve`: the command is speechlm/commands/serve.py.

An alias, run by name as `python -m` runs a module, so that nothing below the commands imports one
(tests/test_imports.py holds every such alias to these three lines)."""

import runpy

runpy.run_module("speechlm.commands.serve", run_name="__main__", alter_sys=True)
