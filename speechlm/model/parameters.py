"""A SpeechLM's parameters by part: the optimizer's AdamW groups and the counts and dtypes a run reports.

Training and reporting only: an exported model folder carries none of this (generate.DROP_METHODS).
"""

from __future__ import annotations


def groups(model, tcfg) -> list[dict]:
    """AdamW groups; no weight decay for biases, norms and embeddings."""
    specs = {
        "projector": (tcfg.learning_rate, tcfg.projector_weight_decay),
        "decoder": (tcfg.decoder_learning_rate, tcfg.weight_decay),
        "encoder": (tcfg.encoder_learning_rate, tcfg.weight_decay),
    }
    buckets: dict[str, list] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        part = name.split(".", 1)[0]
        no_decay = p.ndim < 2 or "norm" in name or "embed" in name or name.endswith(".bias")
        buckets.setdefault(part + ("_no_decay" if no_decay else ""), []).append(p)
    out = []
    for key, params in buckets.items():
        part = key.removesuffix("_no_decay")
        lr, wd = specs[part]
        out.append({"name": key, "params": params, "lr": lr, "weight_decay": 0.0 if key != part else wd})
    if not out:
        raise ValueError("nothing to train: every part is frozen (check training.freeze_* and use_lora)")
    return out


def counts(model) -> dict[str, tuple[int, int]]:
    """part -> (total, trainable); LoRA counted apart from the decoder it adapts."""
    out: dict[str, list[int]] = {k: [0, 0] for k in ("encoder", "projector", "decoder", "lora")}
    for name, p in model.named_parameters():
        part = "lora" if "lora_" in name else name.split(".", 1)[0]
        out[part][0] += p.numel()
        out[part][1] += p.numel() if p.requires_grad else 0
    return {k: (v[0], v[1]) for k, v in out.items()}


def dtypes(model) -> dict[str, str]:
    """part -> the dtype its weights are held in ("-" for LoRA when there is none)."""
    out = {}
    for part, mod in (("encoder", model.encoder), ("projector", model.projector)):
        out[part] = str(next(mod.parameters()).dtype).removeprefix("torch.")
    out["decoder"] = str(model._base_lm().get_input_embeddings().weight.dtype).removeprefix("torch.")
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    out["lora"] = str(lora[0].dtype).removeprefix("torch.") if lora else "-"
    return out


def format_table(counts: dict, dtypes: dict | None = None) -> str:
    dtypes = dtypes or {}
    lines = [f"{'part':<10} {'total':>15} {'trainable':>15}  dtype"]
    for part, (total, trainable) in counts.items():
        lines.append(f"{part:<10} {total:>15,} {trainable:>15,}  {dtypes.get(part, '')}")
    total = sum(v[0] for v in counts.values())
    trainable = sum(v[1] for v in counts.values())
    lines.append(f"{'total':<10} {total:>15,} {trainable:>15,}")
    return "\n".join(lines)
