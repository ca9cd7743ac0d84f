"""How long DeepSpeed's universal conversion (elastic resume) takes for the real default's trainable
state: the production projector and the LoRA adapters (rank 64, all-linear) of Qwen3.5-2B, fp32,
with AdamW's two moments, shapes from the bundled real configs on the meta device (no download).

One process (gloo, CPU) builds a module holding exactly those tensors, takes one AdamW step under
ZeRO-2 so the moments exist, saves a DeepSpeed checkpoint as the trainer does, and times
`speechlm.train.elastic.convert` (ds_to_universal) on it. The data volume is the same whatever
world size wrote the checkpoint (the partitions add up to the full state).

    python bench/universal_convert.py [--stage 2] [--out /tmp/ucp-bench]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's speechlm


def trainable_shapes() -> dict[str, tuple]:
    """Every trainable tensor of the production SpeechLM, built on the meta device as the planner builds it."""
    from speechlm import config as config_mod
    from speechlm.model.meta import meta_speechlm

    model = meta_speechlm(config_mod.load(config_mod.Config, "production", None, []))
    return {n: tuple(p.shape) for n, p in model.named_parameters() if p.requires_grad}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", type=int, default=2)
    ap.add_argument("--out", default="/tmp/ucp-bench")
    args = ap.parse_args()
    import torch

    from speechlm.train import elastic
    from speechlm.train import engine as engine_mod

    shapes = trainable_shapes()
    n = sum(torch.Size(s).numel() for s in shapes.values())

    class State(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.ParameterDict(
                {k.replace(".", "_"): torch.nn.Parameter(torch.randn(s) * 0.01) for k, s in shapes.items()}
            )

    engine_mod.default_launcher_env()
    engine_mod.init_distributed()
    import deepspeed

    model = State()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ds = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "train_batch_size": 1,
        "zero_optimization": {"stage": args.stage},
        "bf16": {"enabled": False},
    }
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=ds, dist_init_required=False)
    loss = sum((p.float() ** 2).sum() for p in engine.module.parameters())
    engine.backward(loss)
    engine.step()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.monotonic()
    engine.save_checkpoint(str(out / "ds"), tag="state", save_latest=False, exclude_frozen_parameters=True)
    saved = time.monotonic() - t0
    size = sum(f.stat().st_size for f in (out / "ds").rglob("*") if f.is_file())
    took = elastic.convert(out / "ds", "state", out / "universal")
    usize = sum(f.stat().st_size for f in (out / "universal").rglob("*") if f.is_file())
    print(
        json.dumps(
            {
                "params": n,
                "tensors": len(shapes),
                "zero_stage": args.stage,
                "checkpoint_mib": size / 2**20,
                "save_s": round(saved, 1),
                "convert_s": round(took, 1),
                "universal_mib": usize / 2**20,
                "cpus": os.cpu_count(),
            }
        )
    )
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
