"""Train on a rented GPU (`speechlm runpod ...`, speechlm/commands/runpod.py): pod.py creates, waits
for and removes the pod through runpodctl; host.py deploys the code to its host, trains in tmux and
follows it over SSH (secrets travel through ssh's stdin, never on a command line or in a file)."""

from speechlm.runpod.host import REMOTE_DIR, deps_script
from speechlm.runpod.pod import DEFAULT_IMAGE

__all__ = ["DEFAULT_IMAGE", "REMOTE_DIR", "deps_script"]
