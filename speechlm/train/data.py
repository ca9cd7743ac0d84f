"""The trainer's side of the data: build missing shards (before any collective) and the loaders."""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from speechlm.config import REPO_ROOT, Config, ConfigError

log = logging.getLogger("speechlm.train")

SHARD_WAIT_S = 6 * 3600


def _recipe_path(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() or p.exists() else REPO_ROOT / p


def _missing(cfg: Config) -> list[Path]:
    dirs = {Path(s.path) for s in list(cfg.data.train) + list(cfg.data.eval)}
    return sorted(d for d in dirs if not (d / "manifest.json").is_file())


def ensure_shards(cfg: Config) -> None:
    """Build missing shard sets from `data.recipe` on global rank 0; the other ranks wait for the
    manifest (written last). This runs before the process group exists, so a long build cannot
    time out a collective (pitfall 7)."""
    missing = _missing(cfg)
    if not missing:
        return
    if not cfg.data.recipe:
        raise ConfigError(f"data.train: no shards at {missing[0]} and no data.recipe to build them from")
    if int(os.environ.get("RANK", "0")) == 0:
        from speechlm import shard

        recipe = _recipe_path(cfg.data.recipe)
        for out in missing:
            log.warning("building missing shards %s from %s", out, recipe)
            shard.build(str(recipe), str(out), max(1, (os.cpu_count() or 2) // 2))
        still = _missing(cfg)
        if still:
            raise ConfigError(f"data.recipe {cfg.data.recipe} did not produce {still[0]} (check data.train paths)")
        return
    deadline = time.monotonic() + SHARD_WAIT_S
    while _missing(cfg):
        if time.monotonic() > deadline:
            raise RuntimeError(f"rank 0 did not finish building {missing[0]} in {SHARD_WAIT_S} s")
        time.sleep(2)


def check_encoder_limits(cfg: Config) -> None:
    """Shard sets with clips longer than the encoder takes (Whisper: 30 s) stop the run here, at start."""
    from speechlm.data.loader import check_sets_for_encoder
    from speechlm.model.encoders import family_for

    check_sets_for_encoder(cfg, family_for(cfg.model.audio_model_id, cfg.model.trust_remote_code))


def make_loaders(cfg: Config, model, rank: int, world: int):
    """TrainLoader and EvalLoader (None without data.eval) with the model's tokenizer."""
    from speechlm.data import Collator, EvalLoader, TrainLoader

    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        from speechlm import text, tiny

        tokenizer = text.load_tokenizer(tiny.resolve(cfg.model.text_model_id), cfg.model.audio_token)
    collator = Collator.from_config(cfg, tokenizer)
    train = TrainLoader.from_config(cfg, collator, rank=rank, world_size=world)
    ev = EvalLoader.from_config(cfg, collator, rank=rank, world_size=world) if cfg.data.eval else None
    return train, ev
