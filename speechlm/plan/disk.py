"""Disk the plan needs: shards (from their manifests, or the sources' Hub metadata), the Hub cache,
checkpoints, the final model folder and the environment.

A checkpoint holds what the run changes (`checkpoint_facts`):
  model/   the trained weights in fp32 (projector, LoRA adapter; embed_tokens, the decoder or the
           encoder only where they train), the tokenizer, and small config, card and code files;
  ds/      DeepSpeed's module state (the trainable parameters in the training dtype: 2 bytes under
           bf16, 4 under fp32) and optimizer state (fp32 master + two AdamW moments: 12 bytes per
           trainable parameter, summed over ranks);
  trainer_state.json  (the run config, and per rank its reader position and RNG states).
save_total_limit of them are kept, and one more is on disk while a new one is written. The final
folder, written once at the end of a run (and by `speechlm export`), holds every weight (the frozen
bases in their dtype, the trained parts in fp32) and the tokenizer.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from speechlm.config import REPO_ROOT, Config
from speechlm.data import remote
from speechlm.plan.models import Shapes, _offline
from speechlm.shard import sources
from speechlm.shard.sources.hf import hub_files_bytes  # noqa: F401  (speechlm.plan re-exports it)

GIB = 1024**3
FLAC_BYTES_PER_SECOND = 20_000  # 16 kHz 16-bit mono FLAC is ~60% of 32 kB/s
ENV_GIB = 15.0  # Python deps, pip and wheel caches on top of the image's CUDA torch
# a model folder's small files: config.json, speechlm.json, the card, the preprocessor config and the
# generated modelling code (about 0.1 MB measured on the tiny twin's)
MODEL_FILES_BYTES = 150_000
DS_FILES_BYTES = 40_000  # DeepSpeed's zero_to_fp32.py and its pickles' framing
# trainer_state.json: the run's config and scheduler, and per rank its reader position and RNG states
STATE_BYTES = 4_000
STATE_BYTES_PER_RANK = 34_000
ADAM_BYTES = 12  # per trainable parameter: fp32 master weights + AdamW's two moments
UNLIMITED_SAVES = 10  # save_total_limit unset and no max_steps: this many checkpoints assumed
# a tokenizer not on this machine: what its folder holds (tokenizer.json, vocab, merges, config),
# by hub id prefix, else per vocabulary entry (Qwen: 248k tokens in ~11 MB, SmolLM2: 49k in ~3.5 MB)
TOKENIZER_ESTIMATES = {"Qwen/": 11_000_000, "HuggingFaceTB/SmolLM2": 3_500_000}
TOKENIZER_BYTES_PER_TOKEN = 60
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
)
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


def tokenizer_bytes(text_model_id: str, vocab_size: int) -> tuple[int, str]:
    """(bytes, how they were found) of the decoder's tokenizer files: their sizes where the tokenizer
    is on this machine (a local dir, `tiny/*`, the Hub cache), else an estimate."""
    from huggingface_hub import try_to_load_from_cache

    from speechlm.model import ids  # tiny/ and offline/ ids resolve to their folders: only when sizing

    path = Path(ids.resolve(text_model_id))
    if path.is_dir():
        found = [path / f for f in TOKENIZER_FILES if (path / f).is_file()]
    else:
        cached = (try_to_load_from_cache(text_model_id, f) for f in TOKENIZER_FILES)
        found = [Path(c) for c in cached if isinstance(c, str)]
    if found:
        return sum(f.stat().st_size for f in found), "its files"
    for prefix, size in TOKENIZER_ESTIMATES.items():
        if text_model_id.startswith(prefix):
            return size, f"estimate for {prefix.rstrip('/')}"
    return vocab_size * TOKENIZER_BYTES_PER_TOKEN, f"estimate, {TOKENIZER_BYTES_PER_TOKEN} B per vocabulary entry"


def checkpoints_on_disk(cfg: Config) -> tuple[int, str]:
    """(how many checkpoints a run keeps, why): save_total_limit, else every save of max_steps, else a guess."""
    t = cfg.training
    if t.save_total_limit and t.save_total_limit > 0:
        return t.save_total_limit, f"save_total_limit {t.save_total_limit}"
    if t.max_steps > 0:
        n = max(1, math.ceil(t.max_steps / max(1, t.save_steps)))
        return n, f"no save_total_limit: every save of max_steps {t.max_steps}"
    return UNLIMITED_SAVES, f"no save_total_limit and no max_steps: {UNLIMITED_SAVES} assumed"


def checkpoint_facts(cfg: Config, shapes: Shapes, world: int = 1) -> dict:
    """One checkpoint's bytes by part, how many are kept, and the final folder (the module docstring)."""
    trained = shapes.trainable_params
    tok, tok_how = tokenizer_bytes(cfg.model.text_model_id, shapes.vocab_size)
    parts = {
        "model_trained": trained * 4,
        "model_files": tok + MODEL_FILES_BYTES,
        "ds_module": trained * (2 if cfg.training.bf16 else 4),
        "ds_optimizer": trained * ADAM_BYTES,
        "state": DS_FILES_BYTES + STATE_BYTES + STATE_BYTES_PER_RANK * max(1, world),
    }
    kept, why = checkpoints_on_disk(cfg)
    return {
        "bytes": sum(parts.values()),
        "parts": parts,
        "kept": kept,
        "kept_why": why,
        "tokenizer": tok_how,
        # every weight: the frozen ones as stored (bases in model_dtype), the trained ones fp32
        "final_model_bytes": shapes.frozen_bytes + trained * 4 + tok + MODEL_FILES_BYTES,
    }


def disk(cfg: Config, shapes: Shapes, data: dict, world: int = 1) -> dict:
    ck = checkpoint_facts(cfg, shapes, world)
    hub = shapes.download_bytes
    if hub is None:  # offline: the checkpoints as stored on the Hub, in their dtype
        hub = (shapes.encoder_params + shapes.decoder_params) * DTYPE_BYTES.get(cfg.model.model_dtype, 2)
    out = {
        "shards": data["shard_bytes"],
        "hub_cache": hub + data.get("source_bytes", 0),
        "checkpoints": ck["bytes"] * (ck["kept"] + 1),  # the new one is written before the oldest goes
        "final_model": ck["final_model_bytes"],
        "environment": ENV_GIB * GIB,
    }
    out["total"] = sum(out.values())
    return out
