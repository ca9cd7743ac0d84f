"""Worker side: stream a plan's shards with webdataset, decode the clips a batch needs, collate.

One `PlanDataset` per rank; each torch DataLoader worker executes its own list of blocks. A block
is read whole (its clips are shuffled across its shards), keeping the compressed FLAC bytes of the
clips still needed; audio is decoded only for the batch being collated. Blocks whose batches all
lie before the resume step are never opened; within the first block, earlier batches are dropped
without decoding (pitfall 4).

Bad input never stops training or changes step counts: a missing or truncated tar, a member that
is missing, or a clip that won't decode is dropped from its batch, counted and logged; a batch left
empty becomes a weight-0 batch. Shards at a URL are opened by speechlm.data.remote; storage that
stays unreachable through its retries raises `StorageError`, which does stop training.
"""

from __future__ import annotations

import heapq
import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterator

import numpy as np
import torch
from webdataset import tariterators

from speechlm import audio as audio_io
from speechlm.data import remote
from speechlm.data.augment import Augmenter
from speechlm.data.catalog import Catalog
from speechlm.data.epoch_plan import PAD, Block

log = logging.getLogger(__name__)

# a silent second: the padding clip of last resort, when not even the designated clip can be read
# a clip's language and task labels (speechlm.shard.languages), which the collator's prompt and answer read
TASK_KEYS = ("language", "task", "target_text", "target_language")
_SILENCE = {"id": "<pad>", "text": "", "audio": np.zeros(audio_io.SAMPLE_RATE, dtype=np.float32)}


def _split_key(name: str):
    # ids may contain dots: split at the LAST dot (webdataset's default splits at the first)
    m = re.match(r"^(.*)\.([^./]+)$", name)
    return (m.group(1), m.group(2)) if m else (None, None)


def _url_opener(data, handler, io_: remote.RemoteIO):
    """webdataset's url_opener for URLs, through speechlm.data.remote (timeouts, retries, cache)."""
    for sample in data:
        try:
            yield dict(sample, stream=remote.open_shard(sample["url"], io_))
        except Exception as exn:  # noqa: BLE001 - the handler decides
            if handler(exn):
                continue
            break


def read_members(
    files: list[str], wanted: set[str], stats: Counter, io_: remote.RemoteIO = remote.DEFAULT
) -> dict[str, dict]:
    """{id: {"flac": bytes, "json": bytes}} for the `wanted` ids found in the tar `files`.

    Stops reading a shard once everything wanted from it is in hand. Errors (missing file, truncated
    tar) are counted in `stats` and logged; whatever was read before the error is kept. Storage
    unreachable through every retry (`remote.StorageError`) is raised, not skipped.
    """
    found: dict[str, dict] = {}

    def handler(exn: Exception) -> bool:
        if isinstance(exn, remote.StorageError):
            raise exn
        stats["tar_errors"] += 1
        log.warning("skipping unreadable shard data: %s", exn)
        return True  # keep going with the next shard

    for f in files:
        stats["shards_read"] += 1
        src = [{"url": f}]
        if remote.is_url(f):
            streams = _url_opener(src, handler, io_)
        else:
            streams = tariterators.url_opener(src, handler=handler)
        members = tariterators.tar_file_expander(streams, handler=handler)
        for sample in tariterators.group_by_keys(members, keys=_split_key, handler=handler):
            key = sample["__key__"]
            if key in wanted and key not in found:
                found[key] = sample
                if wanted.issubset(found):
                    break
    return found


class PlanDataset(torch.utils.data.IterableDataset):
    """Batches of one rank for one epoch: yields (step, batch) with batch from `collator`."""

    def __init__(
        self,
        catalog: Catalog,
        worker_blocks: list[list[Block]],
        pad_gid: int,
        collator: Callable,
        start_step: int = 0,
        io_: remote.RemoteIO = remote.DEFAULT,
        augment: Augmenter | None = None,
        epoch: int = 0,
    ):
        self.catalog = catalog
        # training only (EvalLoader passes none): each clip's draws come from (seed, epoch, clip id)
        self.augment = augment if augment is not None and augment.enabled else None
        self.epoch = int(epoch)
        self.io = io_
        self.worker_blocks = worker_blocks
        self.pad_gid = pad_gid
        self.collator = collator
        self.start_step = start_step

    def __iter__(self) -> Iterator[tuple[int, dict]]:
        info = torch.utils.data.get_worker_info()
        w = info.id if info is not None else None
        lists = self.worker_blocks if w is None else [self.worker_blocks[w]]
        if w is None and len(lists) > 1:
            # no DataLoader workers: run the workers' lists here, in the same step order
            yield from _merge_in_step_order([self._run(b) for b in lists])
        else:
            yield from self._run(lists[0])

    # --------------------------------------------------------------------------------------

    def _run(self, blocks: list[Block]) -> Iterator[tuple[int, dict]]:
        stats: Counter = Counter()
        pad_sample = None
        for blk in blocks:
            todo = [(s, b) for s, b in zip(blk.steps, blk.batches) if s >= self.start_step]
            if not todo:
                continue  # the whole block lies before the resume point: not even opened
            need = np.unique(np.concatenate([b for _, b in todo if b is not PAD] or [np.zeros(0, np.int64)]))
            members = self._fetch(need, stats)
            for step, gids in todo:
                samples = [] if gids is PAD else [self._sample(int(g), members, stats) for g in gids]
                samples = [s for s in samples if s is not None]
                weight = 1.0
                if not samples:
                    if gids is not PAD:
                        stats["empty_batches"] += 1
                    if pad_sample is None:
                        pad_sample = self._pad_sample()
                    samples, weight = [pad_sample], 0.0
                batch = self.collator([dict(s, weight=weight) for s in samples])
                if self.augment is not None:
                    if self.augment.masks_features:
                        self._spec(batch)
                    stats.update(self.augment.stats)
                    self.augment.stats.clear()
                batch["_step"] = step
                batch["_stats"] = dict(stats)
                stats.clear()
                yield step, batch

    def _fetch(self, gids: np.ndarray, stats: Counter) -> dict[int, dict]:
        if len(gids) == 0:
            return {}
        shard_ix = self.catalog.shard_of(gids)
        out: dict[int, dict] = {}
        for s in np.unique(shard_ix):
            shard = self.catalog.shards[int(s)]
            mine = gids[shard_ix == s]
            base = int(self.catalog.offsets[s])
            wanted = {shard.ids[int(g) - base]: int(g) for g in mine}
            got = read_members([shard.file], set(wanted), stats, self.io)
            for key, g in wanted.items():
                if key in got:
                    out[g] = got[key]
        return out

    def _moves_time(self) -> bool:
        a = self.augment
        return a is not None and a.enabled and a.cfg.speed.prob > 0 and set(a.cfg.speed.factors) != {1.0}

    def _sample(self, gid: int, members: dict[int, dict], stats: Counter) -> dict | None:
        s, clip_id = self.catalog.locate(gid)
        m = members.get(gid)
        if m is None or "flac" not in m or "json" not in m:
            stats["missing_clips"] += 1
            log.warning("clip %s missing from %s: dropped from its batch", clip_id, self.catalog.shards[s].file)
            return None
        try:
            meta = json.loads(m["json"])
            stats["clips_decoded"] += 1
            if not isinstance(meta["text"], str):
                raise ValueError("missing text")
            if not meta["text"].strip() and not self.catalog.shards[s].empty_ok:
                # would teach the model to say nothing, unless the shard recipe kept it so (non-speech clips)
                raise ValueError("empty text")
            wave = audio_io.load(m["flac"])
            if self.augment is not None:
                wave = self.augment(wave, self.epoch, clip_id)
            shortest = getattr(self.collator, "min_samples", 0)
            if len(wave) < shortest:
                raise audio_io.AudioError(f"{len(wave)} samples, fewer than the {shortest} the features need")
            sample = {"id": clip_id, "text": str(meta["text"]), "audio": wave}
            # true word times (a timed shard set), what boundary scoring reads; a speed change
            # would move them, so they are left out of clips augmented that way
            if "words" in meta and not self._moves_time():
                sample["words"] = meta["words"]
            sample.update({k: meta[k] for k in TASK_KEYS if meta.get(k) is not None})
            return sample
        except (audio_io.AudioError, ValueError, KeyError, TypeError) as e:
            stats["bad_clips"] += 1
            log.warning(
                "clip %s in %s is unusable (%s): dropped from its batch", clip_id, self.catalog.shards[s].file, e
            )
            return None

    def _spec(self, batch: dict) -> None:
        """SpecAugment masks on each clip's features, drawn like the clip's other augmentations."""
        frames = batch["feature_mask"].sum(dim=1).tolist()
        for i, clip_id in enumerate(batch["ids"]):
            self.augment.spec(batch["input_features"][i], int(frames[i]), self.epoch, clip_id, self.collator.features)

    def _pad_sample(self) -> dict:
        """The clip that weight-0 batches carry: the plan's designated real clip, read once."""
        if self.pad_gid >= 0:
            local = Counter()
            sample = self._sample(self.pad_gid, self._fetch(np.array([self.pad_gid]), local), local)
            if sample is not None:
                return sample
        return dict(_SILENCE)


def _merge_in_step_order(iters: list[Iterator[tuple[int, dict]]]) -> Iterator[tuple[int, dict]]:
    # each worker's batches come in increasing step order; a lazy merge gives the rank's order
    return heapq.merge(*iters, key=lambda item: item[0])


__all__ = ["PlanDataset", "read_members"]
