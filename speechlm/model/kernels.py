"""Which kernels a model really runs with: attention implementation, linear-attention kernel,
causal conv1d, fused loss. Logged once at training start; `bench/gpu_step.py` prints it.

transformers 5 picks Qwen3.5's linear-attention kernels once, when its modeling module is
imported (`use_kernel_func_from_hub_with_fallback` in transformers.integrations.hub_kernels):
each `@use_kernel_func_from_hub_with_fallback(func, package)` function imports `package` (fla,
causal_conv1d) and keeps the result in its closure, or falls back to the torch reference. We
read that closure, so the report is what transformers resolved, not a guess from pip metadata
(an installed fla that fails to import, e.g. without triton, is reported as the torch path).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from dataclasses import asdict, dataclass, field

import torch

from speechlm.model.loss import chunk_tokens, fused_loss_kind, head_vocab

log = logging.getLogger(__name__)

INSTALL_COMMAND = "bash launch/install_gpu_kernels.sh"
# fallback-capable function packages -> pip distribution (transformers' own map names only fla)
DISTRIBUTIONS = {"fla": "flash-linear-attention", "causal_conv1d": "causal-conv1d"}


@dataclass
class KernelReport:
    attention: str  # the decoder's attn_implementation (sdpa, flash_attention_2, eager)
    linear_attention: str | None  # None: the decoder has no linear-attention layers
    causal_conv1d: str | None
    fused_loss: str
    warnings: list[str] = field(default_factory=list)

    def line(self) -> str:
        parts = [f"attention {self.attention}"]
        if self.linear_attention is not None:
            parts.append(f"linear attention {self.linear_attention}")
        if self.causal_conv1d is not None:
            parts.append(f"causal conv1d {self.causal_conv1d}")
        parts.append(f"loss {self.fused_loss}")
        return "kernels: " + ", ".join(parts)

    def as_dict(self) -> dict:
        return asdict(self)


def fallback_kernels(module_name: str) -> dict[str, dict[str, bool | str]]:
    """package -> {func name: implementation module, or False for the torch reference} for every
    function of a transformers modeling module that transformers wraps with a package fallback."""
    mod = importlib.import_module(module_name)
    found: dict[str, dict] = {}
    for obj in vars(mod).values():
        code, cells = getattr(obj, "__code__", None), getattr(obj, "__closure__", None)
        if code is None or not cells:
            continue
        env = dict(zip(code.co_freevars, (c.cell_contents for c in cells)))
        if not {"package", "implementation", "is_new_implementation", "func_name"} <= env.keys():
            continue
        impl = env["implementation"]
        found.setdefault(env["package"], {})[env["func_name"]] = (
            getattr(impl, "__module__", "?") if env["is_new_implementation"] else False
        )
    return found


def _describe(package: str, funcs: dict | None) -> str | None:
    if not funcs:
        return None
    if all(funcs.values()):
        return f"{DISTRIBUTIONS.get(package, package)} ({package})"
    if not any(funcs.values()):
        return f"torch reference ({DISTRIBUTIONS.get(package, package)} not installed)"
    return "mixed: " + ", ".join(f"{k}={v or 'torch'}" for k, v in sorted(funcs.items()))


def _has_linear_attention(cfg) -> bool:
    return "linear_attention" in (getattr(cfg, "layer_types", None) or [])


def kernel_report(model, device: torch.device | str) -> KernelReport:
    """The kernel set `model` (a SpeechLM) runs with on `device`."""
    device = torch.device(device)
    lm = model._base_lm()
    cfg = lm.config.get_text_config() if hasattr(lm.config, "get_text_config") else lm.config
    attention = str(getattr(lm.config, "_attn_implementation", None) or "default")
    linear = conv = None
    warnings = []
    if _has_linear_attention(cfg):
        kernels = fallback_kernels(type(lm).__module__)
        if not kernels:  # a transformers that resolves differently: say what is installed, and that it's a guess
            kernels = {pkg: {"?": pkg if importlib.util.find_spec(pkg) else False} for pkg in DISTRIBUTIONS}
        linear = _describe("fla", kernels.get("fla")) or "torch (this model's own implementation)"
        conv = _describe("causal_conv1d", kernels.get("causal_conv1d"))
        if device.type == "cuda" and not all((kernels.get("fla") or {"": False}).values()):
            warnings.append(
                f"{cfg.model_type}'s linear-attention layers run transformers' torch reference kernels on CUDA "
                f"(several times slower, far more activation memory): install them with `{INSTALL_COMMAND}`"
            )
    head = lm.get_output_embeddings()
    kind, why = fused_loss_kind(head, device)
    loss = (
        "liger fused linear cross-entropy"
        if kind == "liger"
        else f"chunked torch cross-entropy ({chunk_tokens(head_vocab(head))} label tokens per chunk; {why})"
    )
    return KernelReport(attention, linear, conv, loss, warnings)


def log_kernels(model, device) -> KernelReport:
    """Log the kernel set once (INFO), and each warning on its own line."""
    rep = kernel_report(model, device)
    log.info("%s", rep.line())
    for w in rep.warnings:
        log.warning("%s", w)
    return rep
