"""Checks made before a loader starts: the longest clip against the encoder's limit (after the
slowest speed factor), and the workers' shared-memory batches against /dev/shm."""

from __future__ import annotations

import shutil
from pathlib import Path

from speechlm.config import ConfigError, DataSet
from speechlm.data.catalog import Catalog, load_catalog
from speechlm.data.epoch_plan import PAD, Block

SHM_DIR = Path("/dev/shm")


def largest_batch_seconds(catalog: Catalog, worker_blocks: list[list[Block]], stretch: float = 1.0) -> float:
    """Padded audio seconds (clips x the longest) of the largest batch these workers will collate;
    `stretch`: how much longer augmentation can make a clip (speed perturbation below 1)."""
    sizes = [
        len(b) * float(catalog.durations[b].max())
        for blocks in worker_blocks
        for blk in blocks
        for b in blk.batches
        if b is not PAD and len(b)
    ]
    return max(sizes, default=0.0) * stretch


def check_shared_memory(num_workers: int, prefetch_factor: int, batch_bytes: float, shm_dir: Path = SHM_DIR) -> None:
    """Refuse to start DataLoader workers that /dev/shm cannot hold.

    Workers hand batches over through shared memory. When it runs out (Docker's default is 64 MiB)
    the worker's send fails in a background thread and the trainer waits forever, so the need is
    checked up front: up to workers x prefetch_factor batches are in flight at once.
    """
    if num_workers <= 0 or not shm_dir.is_dir():
        return
    need = num_workers * prefetch_factor * batch_bytes
    free = shutil.disk_usage(shm_dir).free
    if need > free:
        raise ConfigError(
            f"data.num_workers={num_workers} x data.prefetch_factor={prefetch_factor} keep up to "
            f"{need / 2**20:.0f} MiB of batches in shared memory, but {shm_dir} has {free / 2**20:.0f} MiB free "
            "(DataLoader workers would hang): give the container more (docker run --shm-size=16g), or lower "
            "data.num_workers (0 collates in the trainer), data.prefetch_factor or the batch size"
        )


def check_workers(
    catalog: Catalog, worker_blocks, collator, num_workers: int, prefetch_factor: int, stretch: float = 1.0
) -> None:
    per_second = getattr(collator, "bytes_per_audio_second", 0)
    largest = largest_batch_seconds(catalog, worker_blocks, stretch)
    check_shared_memory(num_workers, prefetch_factor, largest * per_second)


def check_clip_limit(
    catalog: Catalog, sets: list[DataSet], limit: float | None, family: str, what: str, stretch: float = 1.0
) -> None:
    """Refuse, before any step, a shard set whose longest clip (from its manifest, times `stretch`: the
    slowest speed perturbation) is longer than the encoder takes (`limit` seconds: the encoder family's
    max_seconds, e.g. Whisper's 30 s)."""
    if not limit:
        return
    for k, ds in enumerate(sets):
        longest = max(
            (float(sh.durations.max()) for sh in catalog.shards if sh.set_index == k and len(sh.durations)), default=0.0
        )
        if longest * stretch > limit:
            slowed = (
                f" ({longest * stretch:.2f} s after data.augment.speed.factors slows them by {stretch:.3g}x)"
                if stretch != 1.0
                else ""
            )
            raise ConfigError(
                f"{what}[{k}]: shard set {ds.path} (split {ds.split}) has clips up to "
                f"{longest:.2f} s{slowed}, "
                f"longer than the {family} encoder's {limit:g} s limit; re-shard it with a lower "
                f"maximum duration or choose another model.audio_model_id"
            )


def check_sets_for_encoder(cfg, family) -> None:
    """The same check for a config's train and eval sets, from their manifests alone: the trainer runs it
    at start, before any process group or model. Train clips count after the slowest speed perturbation."""
    slowest = cfg.data.augment.max_stretch
    for what, sets, stretch in (("data.train", cfg.data.train, slowest), ("data.eval", cfg.data.eval, 1.0)):
        if sets:
            catalog = load_catalog([d.path for d in sets], [d.split for d in sets], what=what)
            check_clip_limit(catalog, sets, family.max_seconds, family.name, what, stretch)


def collator_limit(collator) -> tuple[float | None, str]:
    return getattr(collator, "max_seconds", None), getattr(getattr(collator, "family", None), "name", "audio")
