"""SmolLM2 GGUF -> a plain HF `LlamaForCausalLM` folder (weights dequantized to fp32) with its tokenizer.

transformers loads a GGUF file (`from_pretrained(dir, gguf_file=...)`, needs the `gguf` package) but
refuses to `save_pretrained` a model "quantized with gguf"; a fresh model built from the same config
without `quantization_config` takes the dequantized state dict and saves normally.
"""

from __future__ import annotations

from pathlib import Path

import torch


def convert(src: Path, out: Path) -> None:
    """src: the .gguf file -> out: an HF folder (config, safetensors, tokenizer with chat template)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src = Path(src)
    kw = {"gguf_file": src.name}
    loaded = AutoModelForCausalLM.from_pretrained(src.parent, dtype=torch.float32, **kw)
    cfg = AutoConfig.from_pretrained(src.parent, **kw)
    for key in ("quantization_config",):
        if hasattr(cfg, key):
            delattr(cfg, key)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and cfg.tie_word_embeddings)]
    if missing or unexpected:
        raise ValueError(f"GGUF -> HF: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.tie_weights()
    model.generation_config = loaded.generation_config
    model.save_pretrained(out)
    tok = AutoTokenizer.from_pretrained(src.parent, **kw)
    if tok.chat_template is None:
        raise ValueError(f"{src.name}: the GGUF tokenizer carries no chat template")
    tok.save_pretrained(out)
