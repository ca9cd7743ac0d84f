"""`python -m speechlm.model` is `speechlm model`: the command is speechlm/commands/model.py.

An alias, run by name as `python -m` runs a module, so that nothing below the commands imports one
(tests/test_imports.py holds every such alias to these three lines)."""

import runpy

runpy.run_module("speechlm.commands.model", run_name="__main__", alter_sys=True)
