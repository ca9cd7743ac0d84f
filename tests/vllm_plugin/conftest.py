"""The plugin's package (vllm_plugin/speechlm_vllm) on sys.path: its pure parts (folder.py, stops.py)
import without vLLM, so their tests run in speechlm's environment, against the folder speechlm wrote."""

import sys

from paths import REPO

sys.path.insert(0, str(REPO / "vllm_plugin"))
