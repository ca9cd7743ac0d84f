"""speechlm's vLLM plugin: `vllm serve MODEL_FOLDER` for a speechlm model folder.

Installed beside vLLM (`make vllm`: .venv-vllm), it is found through entry points:
- `vllm.general_plugins` -> `register()`: the folder's config class for `model_type: speechlm`, the
  model classes for its architecture `SpeechLMForASR` (`SpeechLMHybridForASR` for a hybrid decoder,
  Qwen3.5: config.py, model.py) with the decoder architecture's own config hook, and the long-form
  cut for vLLM's transcription endpoint (server.py);
- `vllm.logits_processors` -> `SpeechLMStops` (logits.py): speechlm's token budget and loop rule.

It imports nothing of speechlm: what it shares with speechlm comes from the folder's own files
(folder.py). docs/design.md, "Serving on vLLM", has the design.
"""

from __future__ import annotations

MODEL_CLASSES = {"SpeechLMForASR": "SpeechLMForVLLM", "SpeechLMHybridForASR": "SpeechLMHybridForVLLM"}


def register() -> None:
    """vLLM calls this in every process it starts (entry point `vllm.general_plugins`)."""
    from transformers import AutoConfig
    from vllm import ModelRegistry

    from .config import DecoderConfigHook, SpeechLMVllmConfig

    AutoConfig.register("speechlm", SpeechLMVllmConfig, exist_ok=True)
    for arch, cls in MODEL_CLASSES.items():
        if arch not in ModelRegistry.get_supported_archs():
            ModelRegistry.register_model(arch, f"speechlm_vllm.model:{cls}")
    DecoderConfigHook.install(MODEL_CLASSES)
    from . import server

    server.install()
