"""A small stand-in for SpeechLM (frozen 'encoder', trainable 'projector' and 'decoder', the same
parameter-group interface) in a real DeepSpeed engine (world size 1, gloo): the optimizer, engine and
checkpoint tests of tests/train/ train it a few steps."""

from __future__ import annotations

from pathlib import Path

import torch

from speechlm import config as config_mod
from speechlm.config import Config
from speechlm.train import engine as engine_mod
from speechlm.train import optim


def cfg_with(*overrides):
    # a fixed micro batch unless a test says otherwise (production's "auto" needs a device to resolve)
    return config_mod.load(Config, "production", None, ["training.per_device_train_batch_size=8", *overrides])


class StandIn(torch.nn.Module):
    """Frozen 'encoder', trainable 'projector' and 'decoder', with the SpeechLM group interface."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.encoder = torch.nn.Linear(4, 8)
        self.projector = torch.nn.Linear(8, 8)
        self.decoder = torch.nn.Linear(8, 1)
        self.encoder.requires_grad_(False)

    def parameter_groups(self, t):
        return [
            {
                "name": "projector",
                "params": list(self.projector.parameters()),
                "lr": t.learning_rate,
                "weight_decay": t.projector_weight_decay,
            },
            {
                "name": "decoder",
                "params": list(self.decoder.parameters()),
                "lr": t.decoder_learning_rate,
                "weight_decay": t.weight_decay,
            },
            {
                "name": "encoder",
                "params": list(self.encoder.parameters()),
                "lr": t.encoder_learning_rate,
                "weight_decay": t.weight_decay,
            },
        ]

    def forward(self, x, y):
        return torch.nn.functional.mse_loss(self.decoder(torch.tanh(self.projector(self.encoder(x)))).squeeze(-1), y)

    def save_pretrained(self, d):
        Path(d).mkdir(parents=True)
        torch.save(self.state_dict(), Path(d) / "model.pt")


def make_engine(stage=2, clip=1.0):
    cfg = cfg_with(
        f"deepspeed.zero_stage={stage}",
        "training.per_device_train_batch_size=4",
        "training.bf16=false",
        f"training.max_grad_norm={clip}",
        "training.warmup_steps=0",
    )
    model = StandIn()
    opt = optim.build_optimizer(model, cfg.training)
    sched = optim.build_scheduler(opt, cfg.training, 100)
    return engine_mod.build_engine(model, opt, sched, engine_mod.build_ds_config(cfg, 1)), model


def batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 4, generator=g), torch.randn(4, generator=g)


def train_steps(engine, n, seed=1):
    for i in range(n):
        loss = engine(*batch(seed + i))
        engine.backward(loss)
        engine.step()


def trainable(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}
