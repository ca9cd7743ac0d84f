"""Disk the plan needs: shards (from their manifests, or the sources' Hub metadata), the Hub cache,
checkpoints and the environment."""

from __future__ import annotations

import json
from pathlib import Path

from speechlm.config import REPO_ROOT, Config
from speechlm.data import remote
from speechlm.plan.models import Shapes, _offline
from speechlm.shard import sources
from speechlm.shard.sources.hf import hub_files_bytes  # noqa: F401  (speechlm.plan re-exports it)

GIB = 1024**3
FLAC_BYTES_PER_SECOND = 20_000  # 16 kHz 16-bit mono FLAC is ~60% of 32 kB/s
ENV_GIB = 15.0  # Python deps, pip and wheel caches on top of the image's CUDA torch
DTYPE_BYTES = {
    "bfloat16": 2,
    "float16": 2,
    "float32": 4,
    "BF16": 2,
    "F16": 2,
    "F32": 4,
    "F64": 8,
    "I64": 8,
    "I32": 4,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}


def _manifest(path: str) -> tuple[Path, dict] | None:
    p = Path(path) if Path(path).is_absolute() else REPO_ROOT / path
    m = p / "manifest.json"
    return (p, json.loads(m.read_text())) if m.is_file() else None


def _remote_manifest(url: str) -> dict | None:
    try:
        return json.loads(
            remote.read_bytes(remote.join(url, "manifest.json"), remote.RemoteIO(retries=1, timeout_s=10))
        )
    except (OSError, ValueError):  # unreachable or not there: the set's size is reported as unknown
        return None


def data_facts(cfg: Config) -> dict:
    """Shard bytes and the longest clip, from the built shards' manifests where they exist. A set at
    a URL stays there: it takes local disk only through data.cache_dir (at most data.cache_max_gb).
    A training set's clips count as long as the slowest speed perturbation makes them (data.augment)."""
    train_paths, stretch = {d.path for d in cfg.data.train}, cfg.data.augment.max_stretch
    out = {"shard_bytes": 0, "max_clip_seconds": None, "unknown": []}
    remote_bytes = 0.0
    for ds in {d.path: d for d in cfg.data.train + cfg.data.eval}.values():
        if remote.is_url(ds.path):
            root, man = None, _remote_manifest(ds.path)
            if man is None:
                out["unknown"].append(ds.path)
                continue
        else:
            found = _manifest(ds.path)
            if not found:
                continue
            root, man = found
        for split in man.get("splits", {}).values():
            for sh in split.get("shards", []):
                if root is None:
                    remote_bytes += sh.get("seconds", 0) * FLAC_BYTES_PER_SECOND
                else:
                    f = root / sh["file"]
                    out["shard_bytes"] += (
                        f.stat().st_size if f.is_file() else sh.get("seconds", 0) * FLAC_BYTES_PER_SECOND
                    )
                longest = max(sh.get("durations") or [0]) * (stretch if ds.path in train_paths else 1.0)
                out["max_clip_seconds"] = max(out["max_clip_seconds"] or 0, longest)
    if cfg.data.cache_dir:
        out["shard_bytes"] += min(remote_bytes, cfg.data.cache_max_gb * GIB)
    missing = [d.path for d in cfg.data.train + cfg.data.eval if not remote.is_url(d.path) and not _manifest(d.path)]
    if missing:  # not built yet: size the build from its sources' Hub metadata
        source = _source_bytes(cfg.data.recipe)
        if source is None:
            out["unknown"] = sorted(set(missing))
        else:  # the build downloads the sources (Hub cache), then writes FLAC shards of about that size
            out["source_bytes"] = source
            out["shard_bytes"] += source
    return out


def _source_bytes(recipe: str | None) -> int | None:
    """Download size of a shard recipe's Hub sources (files under the subset), or None if unknown."""
    import yaml

    if not recipe or _offline():
        return None
    path = Path(recipe) if Path(recipe).is_absolute() else REPO_ROOT / recipe
    if not path.is_file():
        path = REPO_ROOT / "shards" / f"{recipe}.yaml"
    if not path.is_file():
        return None
    total = 0
    for src in (yaml.safe_load(path.read_text()) or {}).get("sources", []):
        size = sources.source_type(src.get("kind")).estimate_bytes(src)
        if size is None:
            return None
        total += size
    return total


def disk(cfg: Config, shapes: Shapes, data: dict) -> dict:
    # a checkpoint: DeepSpeed state (fp32 master + m + v, 16-bit trainable) + speechlm's own model
    # files (fp32 trainables); the frozen bases are referenced, not copied
    ckpt = shapes.trainable_params * (12 + 2 + 4)
    keep = (cfg.training.save_total_limit or 10) + 1  # the new one is written before the oldest goes
    hub = shapes.download_bytes
    if hub is None:  # offline: the checkpoints as stored on the Hub, in their dtype
        hub = (shapes.encoder_params + shapes.decoder_params) * DTYPE_BYTES.get(cfg.model.model_dtype, 2)
    out = {
        "shards": data["shard_bytes"],
        "hub_cache": hub + data.get("source_bytes", 0),
        "checkpoints": ckpt * keep,
        "environment": ENV_GIB * GIB,
    }
    out["total"] = sum(out.values())
    return out
