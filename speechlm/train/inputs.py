"""The trainer's side of the data: build missing shards (before any collective) and the loaders."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from speechlm import text
from speechlm.config import REPO_ROOT, Config, ConfigError, origin_of
from speechlm.data import Collator, EvalLoader, TrainLoader
from speechlm.data.limits import check_sets_for_encoder
from speechlm.data.remote import is_url
from speechlm.model import encoders, ids

log = logging.getLogger("speechlm.train")

SHARD_WAIT_S = 6 * 3600


def _recipe_path(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() or p.exists() else REPO_ROOT / p


def _missing(cfg: Config) -> list[Path]:
    # a set at a URL is read where it is, never built here: a missing manifest there is the
    # loader's ConfigError naming it
    dirs = {Path(s.path) for s in list(cfg.data.train) + list(cfg.data.eval) if not is_url(s.path)}
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
    check_recipe_builds(cfg, missing)
    if int(os.environ.get("RANK", "0")) == 0:
        from speechlm import shard  # the shard builder and its audio/text tooling: only when shards are missing

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


def check_recipe_builds(cfg: Config, missing: list[Path]) -> None:
    """`data.recipe` builds a missing set only where the same file (or the command line) set both the
    recipe and the set's path: a recipe inherited from a base config (the demo's shards/demo.yaml)
    never fills a path the user typed (a typo would train on the demo corpus)."""
    recipe_by = origin_of(cfg, "data.recipe")
    sets = [("data.train", i, s) for i, s in enumerate(cfg.data.train)]
    sets += [("data.eval", i, s) for i, s in enumerate(cfg.data.eval)]
    for what, i, s in sets:
        if Path(s.path) not in missing:
            continue
        path_by = origin_of(cfg, f"{what}.{i}.path")
        if path_by != recipe_by:
            raise ConfigError(
                f"{what}[{i}].path: no shard set at {s.path} (no manifest.json; from {path_by or 'the defaults'}), "
                f"and data.recipe ({cfg.data.recipe}) was set by {recipe_by or 'the defaults'}, which builds only the "
                f"paths set beside it; build yours first (speechlm shard --config YOUR_RECIPE --out {s.path}), "
                "or name the recipe that builds it beside the path (data.recipe=YOUR_RECIPE)"
            )


def check_encoder_limits(cfg: Config, family) -> None:
    """Shard sets with clips longer than the run's encoder family takes (Whisper: 30 s) stop the run
    here, at start."""
    check_sets_for_encoder(cfg, family)


def make_loaders(cfg: Config, model, rank: int, world: int):
    """TrainLoader and EvalLoader (None without data.eval) with the model's tokenizer."""
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        tokenizer = text.load_tokenizer(ids.resolve(cfg.model.text_model_id), cfg.model.audio_token)
    family = getattr(model, "family", None) or encoders.family_for(
        cfg.model.audio_model_id, cfg.model.trust_remote_code
    )
    collator = Collator.from_config(cfg, tokenizer, family=family)  # resolved once per run
    train = TrainLoader.from_config(cfg, collator, rank=rank, world_size=world)
    ev = EvalLoader.from_config(cfg, collator, rank=rank, world_size=world) if cfg.data.eval else None
    return train, ev
