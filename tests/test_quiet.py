"""speechlm's commands keep third-party notices that say nothing to a user out of the log (issue 35,
mistake 10): transformers' FutureWarnings and DeepSpeed's "Setting accelerator to CPU"; `--verbose`
shows them. Child processes, as a user's command starts them."""

from __future__ import annotations

import os
import subprocess
import sys

from paths import REPO

# a real deprecation inside transformers (a property its own code warns about), then DeepSpeed's import
SCRIPT = """
import sys
from speechlm import quiet
quiet.take_flag(sys.argv[1:])  # the first two lines of speechlm.commands.main
quiet.install()
from transformers import LlamaConfig, LlamaForCausalLM
m = LlamaForCausalLM(LlamaConfig(hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 num_key_value_heads=2, vocab_size=32))
m.is_gradient_checkpointing
import deepspeed
print("done")
"""


def run(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "SPEECHLM_VERBOSE"}
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0 and "done" in p.stdout, p.stderr
    return p.stdout + p.stderr


def test_10_library_notices_are_filtered_and_verbose_shows_them():
    quiet = run()
    assert "FutureWarning" not in quiet and "Setting accelerator to CPU" not in quiet
    loud = run("--verbose")
    assert "FutureWarning: `is_gradient_checkpointing` is deprecated" in loud and "Setting accelerator to CPU" in loud


def test_10_the_verbose_flag_is_taken_out_of_the_command_line(monkeypatch):
    from speechlm import quiet

    monkeypatch.delenv(quiet.ENV, raising=False)
    assert quiet.take_flag(["train", "--config", "tiny"]) == ["train", "--config", "tiny"] and not quiet.verbose()
    assert quiet.take_flag(["--verbose", "train", "--", "--verbose"]) == ["train", "--", "--verbose"]
    assert quiet.verbose()
