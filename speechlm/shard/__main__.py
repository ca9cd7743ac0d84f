"""`python -m speechlm.shard` is `speechlm shard`: the command is speechlm/commands/shard.py.

An alias, run by name as `python -m` runs a module, so that nothing below the commands imports one
(tests/test_imports.py holds every such alias to these three lines)."""

import runpy

runpy.run_module("speechlm.commands.shard", run_name="__main__", alter_sys=True)
