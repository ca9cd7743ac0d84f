"""Worker for tests/model/test_model_loss_zero3.py (run under torchrun, 2 ranks): a ZeRO-3 partitioned LM
head (frozen, or with `tied` tied to a trained embedding), a different number of label tokens per
rank (so a different number of chunks), loss + backward + step.
Prints the rank's loss and its hidden-state gradient norm as JSON."""

import json
import sys

import torch

sys.path.insert(0, ".")
from speechlm.model.loss import chunked_token_ce  # noqa: E402
from speechlm.train.engine import init_distributed  # noqa: E402


class Head(torch.nn.Module):
    def __init__(self, tied: bool):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)  # trainable, below the head (as LoRA/projector are)
        self.embed = torch.nn.Embedding(50, 8)
        self.lm_head = torch.nn.Linear(8, 50, bias=False)
        if tied:  # the tiny recipe: tied embeddings, trained
            self.lm_head.weight = self.embed.weight


def main():
    import deepspeed

    rank, world, _ = init_distributed()
    torch.manual_seed(0)
    tied = sys.argv[1:] == ["tied"]
    model = Head(tied)
    if not tied:  # production: a frozen head (LoRA all-linear leaves it out, embeddings frozen)
        model.lm_head.requires_grad_(False)
        model.embed.requires_grad_(False)
    cfg = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
    }
    engine, *_ = deepspeed.initialize(
        model=model, model_parameters=[p for p in model.parameters() if p.requires_grad], config=cfg
    )
    assert hasattr(engine.module.lm_head.weight, "ds_id")
    n = 10 if rank == 0 else 3  # chunks of 4: 3 on rank 0, 1 on rank 1
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(n, 8, generator=g)
    t = torch.randint(0, 50, (n,), generator=g)
    h = engine.module.proj(x) + engine.module.embed(t)
    loss = chunked_token_ce(engine.module.lm_head, h, t, chunk=4).mean()
    engine.backward(loss)
    engine.step()
    print(json.dumps({"rank": rank, "loss": loss.item()}), flush=True)


if __name__ == "__main__":
    main()
