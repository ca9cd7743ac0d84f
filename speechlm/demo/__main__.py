"""`python -m speechlm.demo` is `speechlm demo`: the command is speechlm/commands/demo.py.

An alias, run by name as `python -m` runs a module, so that nothing below the commands imports one
(tests/test_imports.py holds every such alias to these three lines)."""

import runpy

runpy.run_module("speechlm.commands.demo", run_name="__main__", alter_sys=True)
