"""What the trainer calls: `TrainLoader` (plan-based, resumable) and `EvalLoader`.

    loader = TrainLoader(sets, collator, batch_size=8, rank=r, world_size=n, num_workers=2, seed=44)
    loader.steps_per_epoch            # from the manifests; the same on every rank
    for epoch in ...: loader.set_epoch(epoch); for batch in loader: ...
    state = loader.state_dict()       # {"epoch", "step_in_epoch", "seed", ...}
    loader.load_state_dict(state)     # the next batch is the one after the last one yielded

A state saved under another world size or worker count (an elastic resume) re-plans the rest of
its epoch for this layout: the clips already consumed are left out (speechlm.data.epoch_plan).

Each rank builds the same plan (speechlm.data.epoch_plan) and runs its own part with a torch DataLoader
whose workers collate (features + tokens) in parallel. Batches come out in plan order: a small
reorder buffer undoes any difference between workers' arrival order and step order.
"""

from __future__ import annotations

import atexit
import logging
import signal
from collections import Counter
from collections.abc import Iterator

import torch

from speechlm.config import ConfigError, DataSet
from speechlm.data import token_rates
from speechlm.data.augment import Augmenter
from speechlm.data.catalog import Catalog, load_catalog
from speechlm.data.epoch_plan import EpochPlan, plan_epoch, plan_eval
from speechlm.data.limits import check_clip_limit, check_workers, collator_limit
from speechlm.data.reader import PlanDataset
from speechlm.data.remote import RemoteIO

log = logging.getLogger(__name__)


def _ignore_stop_signals(_worker_id: int) -> None:
    """DataLoader workers leave SIGTERM / SIGUSR1 to the trainer. Slurm (scancel, requeue) and
    `kill -- -PGID` signal every process of the job: a worker that died of it took the trainer down
    ("DataLoader worker is killed by signal") before its pre-emption checkpoint. The trainer saves,
    then closes its loaders, which ends the workers (they also exit when the trainer is gone)."""
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_IGN)


def _batches(
    dataset: PlanDataset, num_workers: int, prefetch_factor: int, first: int, stats: Counter
) -> Iterator[tuple[int, dict]]:
    if num_workers > 0:
        dl = torch.utils.data.DataLoader(
            dataset,
            batch_size=None,
            num_workers=num_workers,
            prefetch_factor=prefetch_factor,
            persistent_workers=False,
            worker_init_fn=_ignore_stop_signals,
        )
    else:
        dl = dataset
    it = iter(dl)
    stop = getattr(it, "_shutdown_workers", None)
    if stop is not None:
        # The workers ignore SIGTERM, and multiprocessing's exit handler ends daemon children with
        # terminate() then join(): it would wait forever on workers this generator left running (an
        # exception upstream keeps it alive in its traceback). Shut them down first: atexit runs the
        # handlers registered last first.
        atexit.register(stop)
    pending: dict[int, dict] = {}
    want = first
    try:
        for item in it:
            step, batch = item
            batch.pop("_step", None)
            stats.update(batch.pop("_stats", {}))
            pending[int(step)] = batch
            if int(step) != want:  # the plan's round robin should match the DataLoader's: count if not
                stats["out_of_order"] += 1
            while want in pending:
                yield want, pending.pop(want)
                want += 1
    finally:
        if stop is not None:
            atexit.unregister(stop)
            stop()
    if pending:  # would mean the plan and the workers disagree: fail loudly, never skip steps
        raise RuntimeError(f"reader ended with steps {sorted(pending)} out of order (expected {want})")


def _check_layout(sets, batch_size, batch_seconds, rank, world_size) -> None:
    if not sets:
        raise ConfigError("data.train: no shard sets given")
    if batch_size <= 0 and batch_seconds <= 0:
        raise ConfigError("training.per_device_train_batch_size or data.batch_seconds must be > 0")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world size {world_size}")


def _bucket_costs(bucket_by: str, catalog: Catalog, collator, sets):
    """What a block's clips are sorted by before batches are cut (`data.bucket_by`): None, their
    durations; with tokens, the decoder tokens each is estimated to take, so that a batch mixing
    languages of unlike tokens per second (kana ~4x English's) is not padded to its wordiest clip."""
    return token_rates.clip_tokens(catalog, collator, sets) if bucket_by == "tokens" else None


class TrainLoader:
    def __init__(
        self,
        sets: list[DataSet],
        collator,
        *,
        batch_size: int = 0,
        batch_seconds: float = 0.0,
        rank: int = 0,
        world_size: int = 1,
        num_workers: int = 2,
        seed: int = 44,
        shuffle_shards_per_block: int = 4,
        prefetch_factor: int = 2,
        remote_io: RemoteIO | None = None,
        augment: Augmenter | None = None,
        bucket_by: str = "seconds",
    ):
        _check_layout(sets, batch_size, batch_seconds, rank, world_size)
        self.remote_io = remote_io or RemoteIO()  # for sets at a URL
        self.catalog: Catalog = load_catalog(
            [s.path for s in sets],
            [s.split for s in sets],
            io_=self.remote_io,
            mixes=[(getattr(s, "languages", {}), getattr(s, "tasks", {})) for s in sets],
        )
        # on-the-fly augmentation (speechlm.data.augment), run in the workers; its seed is the reader's
        self.augment = augment if augment is not None and augment.enabled else None
        self.stretch = self.augment.max_stretch if self.augment else 1.0
        check_clip_limit(self.catalog, sets, *collator_limit(collator), "data.train", self.stretch)
        self.weights = [float(s.weight) for s in sets]
        if sum(self.weights) <= 0:
            raise ConfigError("data.train: every weight is 0, so an epoch has no clips")
        self.collator = collator
        self.batch_size, self.batch_seconds = int(batch_size), float(batch_seconds)
        self.rank, self.world_size = rank, world_size
        self.num_workers, self.prefetch_factor = num_workers, prefetch_factor
        self.seed, self.block = int(seed), int(shuffle_shards_per_block)
        self.epoch, self.step_in_epoch = 0, 0
        # earlier layouts of this epoch (elastic resume): (world_size, num_workers, steps run)
        self.done: list[tuple[int, int, int]] = []
        # skipped input (tar_errors, missing_clips, bad_clips, empty_batches) and work done
        # (shards_read, clips_decoded; out_of_order: batches the reorder buffer held), summed over workers
        self.stats: Counter = Counter()
        self._plan: EpochPlan | None = None
        self.cost = _bucket_costs(bucket_by, self.catalog, collator, sets)

    @classmethod
    def from_config(cls, cfg, collator, rank: int = 0, world_size: int = 1) -> TrainLoader:
        d, t = cfg.data, cfg.training
        by_seconds = d.batching == "seconds"
        if by_seconds and d.batch_seconds <= 0:
            raise ConfigError("data.batch_seconds: must be > 0 with data.batching=seconds")
        return cls(
            d.train,
            collator,
            batch_size=t.per_device_train_batch_size,
            batch_seconds=d.batch_seconds if by_seconds else 0.0,
            rank=rank,
            world_size=world_size,
            num_workers=d.num_workers,
            seed=t.seed,
            shuffle_shards_per_block=d.shuffle_shards_per_block,
            prefetch_factor=d.prefetch_factor,
            remote_io=RemoteIO.from_config(d),
            augment=Augmenter(d.augment, seed=t.seed) if d.augment.enabled else None,
            bucket_by=d.bucket_by,
        )

    # ------------------------------------------------------------------ plan

    def plan(self, epoch: int | None = None) -> EpochPlan:
        epoch = self.epoch if epoch is None else epoch
        if self._plan is None or self._plan.epoch != epoch:
            self._plan = plan_epoch(
                self.catalog,
                self.weights,
                seed=self.seed,
                epoch=epoch,
                world_size=self.world_size,
                num_workers=self.num_workers,
                shards_per_block=self.block,
                batch_size=self.batch_size,
                batch_seconds=self.batch_seconds,
                done=self.done if epoch == self.epoch else (),
                cost=self.cost,
            )
        return self._plan

    @property
    def steps_per_epoch(self) -> int:
        """Batches every rank runs in the current epoch (known from the manifests alone; after an
        elastic resume, in the rest of it)."""
        return self.plan().steps

    def __len__(self) -> int:
        return self.steps_per_epoch

    def total_steps(self, num_epochs: float) -> int:
        """Steps in `num_epochs` epochs from epoch 0 (a fraction counts that share of the last one).

        Bucketing makes the count vary a little from epoch to epoch, so each epoch is planned."""
        whole = int(num_epochs)
        done, self.done = self.done, []  # whole epochs under this layout
        try:
            total = sum(self.plan(e).steps for e in range(whole))
            if num_epochs > whole:
                total += int(round((num_epochs - whole) * self.plan(whole).steps))
        finally:
            self.done, self._plan = done, None
        return total

    def set_epoch(self, epoch: int) -> None:
        # the same epoch keeps the position (a resume loaded it); a new one starts at its first batch
        if epoch != self.epoch:
            self.epoch, self.step_in_epoch, self.done = int(epoch), 0, []
            self._plan = None

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict:
        return {
            "epoch": self.epoch,
            "step_in_epoch": self.step_in_epoch,
            "seed": self.seed,
            "world_size": self.world_size,
            "num_workers": self.num_workers,
            "done": [list(d) for d in self.done],
        }

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.step_in_epoch = int(state["epoch"]), int(state["step_in_epoch"])
        self.seed = int(state.get("seed", self.seed))
        self.done = [tuple(int(x) for x in d) for d in state.get("done", [])]
        layout = (int(state.get("world_size", self.world_size)), int(state.get("num_workers", self.num_workers)))
        if layout != (self.world_size, self.num_workers):
            # the plan depends on the stream count: the epoch's rest is planned again for this layout
            if self.step_in_epoch > 0:
                self.done.append((*layout, self.step_in_epoch))
            self._plan = None
            rest = self.plan()
            log.warning(
                "elastic resume: epoch %d was run by %d ranks x %d workers up to step %d; its remaining "
                "%d clips are planned again for %d ranks x %d workers (%d steps per rank)",
                self.epoch,
                *layout,
                self.step_in_epoch,
                rest.clips,
                self.world_size,
                self.num_workers,
                rest.steps,
            )
            self.step_in_epoch = 0
        self._plan = None

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[dict]:
        plan = self.plan()
        start = self.step_in_epoch
        if start < plan.steps:
            check_workers(
                self.catalog,
                plan.workers[self.rank],
                self.collator,
                self.num_workers,
                self.prefetch_factor,
                self.stretch,
            )
            ds = PlanDataset(
                self.catalog,
                plan.workers[self.rank],
                plan.pad_gid,
                self.collator,
                start_step=start,
                io_=self.remote_io,
                augment=self.augment and self.augment.reseeded(self.seed),
                epoch=self.epoch,
            )
            for step, batch in _batches(ds, self.num_workers, self.prefetch_factor, start, self.stats):
                self.step_in_epoch = step + 1
                yield batch
        # a finished epoch moves on, so the next `for batch in loader` is the next epoch
        self.epoch, self.step_in_epoch, self.done = self.epoch + 1, 0, []


class EvalLoader:
    """The held-out split: the first `max_samples_per_set` clips of each set, the same every time,
    spread equally over ranks (ranks short of batches get weight-0 padding batches)."""

    def __init__(
        self,
        sets: list[DataSet],
        collator,
        *,
        batch_size: int,
        max_samples_per_set: int = 200,
        rank: int = 0,
        world_size: int = 1,
        num_workers: int = 0,
        prefetch_factor: int = 2,
        remote_io: RemoteIO | None = None,
        what: str = "data.eval",
    ):
        if batch_size <= 0:
            raise ConfigError("training.per_device_eval_batch_size: must be > 0")
        self.remote_io = remote_io or RemoteIO()
        self.catalog = load_catalog([s.path for s in sets], [s.split for s in sets], what=what, io_=self.remote_io)
        check_clip_limit(self.catalog, sets, *collator_limit(collator), what)
        self.collator, self.rank, self.num_workers = collator, rank, num_workers
        self.prefetch_factor = prefetch_factor
        self.stats: Counter = Counter()
        self.plan = plan_eval(
            self.catalog,
            max_per_set=max_samples_per_set,
            world_size=world_size,
            num_workers=num_workers,
            batch_size=batch_size,
        )

    @classmethod
    def from_config(cls, cfg, collator, rank: int = 0, world_size: int = 1) -> EvalLoader:
        return cls(
            cfg.data.eval,
            collator,
            batch_size=cfg.training.per_device_eval_batch_size,
            max_samples_per_set=cfg.data.max_eval_samples_per_dataset,
            rank=rank,
            world_size=world_size,
            num_workers=cfg.data.num_workers,
            prefetch_factor=cfg.data.prefetch_factor,
            remote_io=RemoteIO.from_config(cfg.data),
        )

    def __len__(self) -> int:
        return self.plan.steps

    def __iter__(self) -> Iterator[dict]:
        mine = self.plan.workers[self.rank]
        check_workers(self.catalog, mine, self.collator, self.num_workers, self.prefetch_factor)
        ds = PlanDataset(self.catalog, mine, self.plan.pad_gid, self.collator, io_=self.remote_io)
        for _, batch in _batches(ds, self.num_workers, self.prefetch_factor, 0, self.stats):
            yield batch
