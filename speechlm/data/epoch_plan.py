"""The reader's epoch plan: which clips every rank and DataLoader worker batches, in which order.

Every rank computes the same plan from the manifests alone (ids and durations, never audio), so
step counts are known up front (`steps`), all ranks run the same number of steps, and a resume
jumps straight to a step. A clip is named by its global id `gid` in the `Catalog` (speechlm.data.catalog:
all shards of all sets, concatenated); a batch is an int64 array of gids.

Order of operations for epoch e (seeded by (seed, e)):
  1. mixing: weight w of a set = floor(w) full passes + a seeded subset of frac(w) of its clips;
  2. shuffle the shard order;
  3. split over G = world_size * workers streams: with at least G shards, whole shards, largest
     first to the rank with the fewest clips, then likewise to that rank's workers; else clip i to
     stream i % G (so no stream is empty);
  4. per stream, blocks of `shards_per_block` shards: shuffle the block's clips, sort them by
     duration (or by a per-clip `cost`: the decoder tokens a clip is estimated to take, `data.bucket_by:
     tokens`), cut batches (by clip count or total seconds), shuffle the batch order;
  5. per rank: interleave its workers' batches round robin (the order torch's DataLoader yields
     them), add weight-0 padding batches up to the max over ranks.

Elastic resume: an epoch interrupted under one layout (world size x workers) and resumed under
another keeps its clips. `plan_epoch(..., done=[(world, workers, steps), ...])` replays the plan of
each earlier layout, takes out the clips its first `steps` batches consumed, and plans the rest for
the current layout: units keep the epoch's shuffled order and are cut into streams of equal clip
counts (step 3), then steps 4-5 as usual, freshly seeded. Every clip of the
epoch is then seen exactly once across the interruption, and every rank again runs the same
number of steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from speechlm.config import ConfigError
from speechlm.data.catalog import Catalog

PAD = None  # a planned padding batch (weight 0), in place of a gid array


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([int(k) for k in key])


# ------------------------------------------------------------------ steps 1-3: units and streams


def epoch_units(catalog: Catalog, weights: list[float], seed: int, epoch: int) -> list[np.ndarray]:
    """The epoch's reading units (gids of one shard each), mixed by weight, in shuffled order."""
    units: list[np.ndarray] = []
    for k, w in enumerate(weights):
        if w < 0:
            raise ConfigError(f"data.train[{k}].weight: must be >= 0, got {w}")
        per_shard = [g for g in catalog.set_gids(k) if len(g)]
        factors = _set_factors(catalog, k)
        if factors is None:
            units.extend(_weighted(catalog, per_shard, w, _rng(seed, epoch, 1, k)))
            continue
        # a clip's weight is the set's times its language's and task's factor: each group of clips
        # with one factor is mixed in as a set of its own
        for g, f in enumerate(np.unique(factors)):
            group = [gids[factors[gids] == f] for gids in per_shard]
            units.extend(_weighted(catalog, [x for x in group if len(x)], w * f, _rng(seed, epoch, 1, k, g)))
    order = _rng(seed, epoch, 2).permutation(len(units))
    return [units[i] for i in order]


def _weighted(catalog: Catalog, per_shard: list[np.ndarray], w: float, rng) -> list[np.ndarray]:
    """Reading units of clips mixed in with weight w: floor(w) full passes over `per_shard`, plus a
    seeded subset of frac(w) of its clips, grouped by shard."""
    out: list[np.ndarray] = []
    passes, frac = int(np.floor(w)), w - np.floor(w)
    for _ in range(passes):
        out.extend(per_shard)
    if frac > 0 and per_shard:
        every = np.concatenate(per_shard)
        take = int(round(frac * len(every)))
        chosen = np.sort(rng.choice(every, size=take, replace=False))
        shard_ix = catalog.shard_of(chosen)
        out.extend(chosen[shard_ix == s] for s in np.unique(shard_ix))
    return out


def _set_factors(catalog: Catalog, k: int) -> np.ndarray | None:
    """Per clip of the catalog (by gid), the factor of set k's clips (DataSet.languages, .tasks); None when
    the set has none."""
    if all(s.factors is None for s in catalog.shards if s.set_index == k):
        return None
    return np.concatenate([s.factors if s.factors is not None else np.ones(len(s.ids)) for s in catalog.shards])


def _least_loaded(units: list[np.ndarray], bins: int) -> list[list[int]]:
    """Indices of `units` per bin: largest first to the bin with the fewest clips (ties keep the
    shuffled order, so equal shards are dealt round robin); each bin keeps the shuffled order."""
    load = np.zeros(bins, dtype=np.int64)
    out: list[list[int]] = [[] for _ in range(bins)]
    for i in sorted(range(len(units)), key=lambda i: -len(units[i])):
        j = int(np.argmin(load))
        out[j].append(i)
        load[j] += len(units[i])
    return [sorted(o) for o in out]


def split_streams(units: list[np.ndarray], world_size: int, workers: int) -> list[list[np.ndarray]]:
    """Streams r * workers + w. Whole shards when there are at least as many as streams: balanced
    over ranks first (rank imbalance costs padding steps), then over the rank's workers."""
    G = world_size * workers
    streams: list[list[np.ndarray]] = [[] for _ in range(G)]
    if len(units) >= G:
        for r, mine in enumerate(_least_loaded(units, world_size)):
            for w, idx in enumerate(_least_loaded([units[i] for i in mine], workers)):
                streams[r * workers + w] = [units[mine[i]] for i in idx]
    else:
        # clip i of the concatenation to stream i % G, kept grouped by shard: no stream is empty
        bounds = np.cumsum([0] + [len(u) for u in units])
        every = np.concatenate(units) if units else np.zeros(0, dtype=np.int64)
        for j in range(G):
            pos = np.arange(j, len(every), G)
            unit_of = np.searchsorted(bounds, pos, side="right") - 1
            streams[j] = [every[pos[unit_of == u]] for u in np.unique(unit_of)]
    return streams


def split_even(units: list[np.ndarray], G: int) -> list[list[np.ndarray]]:
    """G streams of equal clip counts (+-1): the units' clips in order, cut into G runs, so each
    stream reads a few consecutive (partial) shards."""
    every = np.concatenate(units) if units else np.zeros(0, dtype=np.int64)
    unit_of = np.repeat(np.arange(len(units)), [len(u) for u in units])
    cuts = np.linspace(0, len(every), G + 1).round().astype(np.int64)
    streams = []
    for j in range(G):
        mine, owner = every[cuts[j] : cuts[j + 1]], unit_of[cuts[j] : cuts[j + 1]]
        streams.append([mine[owner == u] for u in np.unique(owner)])
    return streams


# ------------------------------------------------------------------ step 4: blocks and batches


@dataclass
class Block:
    """Shards read together; their clips are shuffled and bucketed into `batches`."""

    gids: np.ndarray  # every clip this block reads (its batches use each once)
    batches: list  # np.ndarray of gids, or PAD
    steps: list[int] = field(default_factory=list)  # the rank-level step of each batch


def cut_batches(durations: np.ndarray, batch_size: int, batch_seconds: float) -> list[slice]:
    """Consecutive slices of sorted clips: `batch_size` clips each, or as many as fit in `batch_seconds`
    of PADDED audio (clips x the longest so far), which is what the model computes on. Sorted by tokens,
    a batch's durations need not rise: its longest clip is then not its last."""
    n = len(durations)
    if batch_seconds and batch_seconds > 0:
        out, start, longest = [], 0, 0.0
        for i, d in enumerate(durations):
            longest = max(longest, float(d))
            if i > start and (i - start + 1) * longest > batch_seconds:
                out.append(slice(start, i))
                start, longest = i, float(d)
        if start < n:
            out.append(slice(start, n))
        return out
    return [slice(i, min(i + batch_size, n)) for i in range(0, n, batch_size)]


def stream_blocks(
    catalog: Catalog,
    units: list[np.ndarray],
    *,
    shards_per_block: int,
    batch_size: int,
    batch_seconds: float,
    rng: np.random.Generator | None,
    cost: np.ndarray | None = None,
) -> list[Block]:
    """Blocks of one stream; rng=None keeps the clip order (eval), else shuffles and buckets by
    `cost` per gid (default: duration)."""
    key = catalog.durations if cost is None else cost
    blocks = []
    for b in range(0, len(units), max(1, shards_per_block)):
        gids = np.concatenate(units[b : b + shards_per_block])
        if rng is not None:
            gids = gids[rng.permutation(len(gids))]
        # stable sort: equal costs keep the shuffled order
        gids = gids[np.argsort(key[gids], kind="stable")]
        batches = [gids[s] for s in cut_batches(catalog.durations[gids], batch_size, batch_seconds)]
        if rng is not None:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        blocks.append(Block(gids, batches))
    return blocks


# ------------------------------------------------------------------ step 5: ranks and padding


@dataclass
class EpochPlan:
    epoch: int
    steps: int  # batches every rank runs this epoch (the max over ranks)
    workers: list[list[list[Block]]]  # [rank][worker] -> blocks, steps assigned
    real_batches: list[int]  # per rank, before padding
    pad_gid: int  # the real clip that padding batches repeat (weight 0); -1 when there is none

    def rank_order(self, rank: int) -> list[tuple[int, int, int]]:
        """(step, worker, index in that worker's batch list) for each step of a rank."""
        out = []
        for w, blocks in enumerate(self.workers[rank]):
            i = 0
            for blk in blocks:
                for s in blk.steps:
                    out.append((s, w, i))
                    i += 1
        return sorted(out)

    @property
    def clips(self) -> int:
        return int(
            sum(
                len(b)
                for ranks in self.workers
                for blocks in ranks
                for blk in blocks
                for b in blk.batches
                if b is not PAD
            )
        )

    def consumed(self, steps: int) -> np.ndarray:
        """The clips (gids, with repeats) that the first `steps` steps of every rank batch."""
        got = [
            b
            for ranks in self.workers
            for blocks in ranks
            for blk in blocks
            for s, b in zip(blk.steps, blk.batches)
            if s < steps and b is not PAD
        ]
        return np.concatenate(got) if got else np.zeros(0, dtype=np.int64)


def assign_steps(worker_blocks: list[list[Block]], steps: int) -> None:
    """Pad a rank's workers up to `steps` batches in all and number them in DataLoader order.

    torch's DataLoader asks its workers round robin and skips exhausted ones; padding goes to the
    workers with the fewest batches, so every worker's batch count is known and the order is fixed.
    """
    counts = [sum(len(b.batches) for b in blocks) for blocks in worker_blocks]
    extra = [0] * len(counts)
    for _ in range(steps - sum(counts)):
        j = int(np.argmin([c + e for c, e in zip(counts, extra)]))
        extra[j] += 1
    for j, e in enumerate(extra):
        if e:
            worker_blocks[j].append(Block(np.zeros(0, dtype=np.int64), [PAD] * e))
    totals = [c + e for c, e in zip(counts, extra)]
    # round robin over the workers that still have batches
    seq_of: list[list[int]] = [[] for _ in totals]
    step, taken = 0, [0] * len(totals)
    while step < steps:
        for j in range(len(totals)):
            if taken[j] < totals[j]:
                seq_of[j].append(step)
                taken[j] += 1
                step += 1
    for j, blocks in enumerate(worker_blocks):
        it = iter(seq_of[j])
        for blk in blocks:
            blk.steps = [next(it) for _ in blk.batches]


def plan_epoch(
    catalog: Catalog,
    weights: list[float],
    *,
    seed: int,
    epoch: int,
    world_size: int,
    num_workers: int,
    shards_per_block: int,
    batch_size: int,
    batch_seconds: float = 0.0,
    done: list[tuple[int, int, int]] | tuple = (),
    cost: np.ndarray | None = None,
) -> EpochPlan:
    """The epoch's plan for this layout; `done` lists earlier layouts of the same epoch, oldest
    first, as (world_size, num_workers, steps run): their clips are left out (elastic resume).
    `cost`: per gid, what bucketing sorts by (default: duration)."""
    units = epoch_units(catalog, weights, seed, epoch)
    opts = dict(
        seed=seed,
        epoch=epoch,
        shards_per_block=shards_per_block,
        batch_size=batch_size,
        batch_seconds=batch_seconds,
        cost=cost,
    )
    for k, (ws, nw, steps) in enumerate(done):
        earlier = _plan_units(catalog, units, world_size=int(ws), num_workers=int(nw), segment=k, **opts)
        units = _without(units, earlier.consumed(int(steps)), catalog.num_clips)
    return _plan_units(catalog, units, world_size=world_size, num_workers=num_workers, segment=len(done), **opts)


def _plan_units(
    catalog, units, *, seed, epoch, world_size, num_workers, shards_per_block, batch_size, batch_seconds, cost, segment
) -> EpochPlan:
    workers = max(1, num_workers)
    G = world_size * workers
    # an epoch's rest holds partly read shards of any size: whole ones would leave ranks uneven
    streams = split_streams(units, world_size, workers) if segment == 0 else split_even(units, G)
    # segment 0 is the ordinary plan; a re-plan of an epoch's rest shuffles afresh
    key = (seed, epoch, 3) if segment == 0 else (seed, epoch, 3, segment)
    per_stream = [
        stream_blocks(
            catalog,
            streams[j],
            shards_per_block=shards_per_block,
            batch_size=batch_size,
            batch_seconds=batch_seconds,
            rng=_rng(*key[:3], j, *key[3:]),
            cost=cost,
        )
        for j in range(G)
    ]
    return _finish(per_stream, world_size, workers, epoch, units)


def _without(units: list[np.ndarray], taken: np.ndarray, num_clips: int) -> list[np.ndarray]:
    """`units` less the clips in `taken`, as a multiset: a set mixed in with weight 2 has each clip
    twice per epoch, and a clip taken once leaves its later occurrence. Empty units are dropped."""
    if not units:
        return []
    every = np.concatenate(units)
    owed = np.bincount(taken.astype(np.int64), minlength=num_clips) if len(taken) else np.zeros(num_clips, np.int64)
    order = np.argsort(every, kind="stable")  # the occurrence number of each clip, in unit order
    ranked = every[order]
    first = np.concatenate([[0], np.flatnonzero(np.diff(ranked)) + 1]) if len(ranked) else np.zeros(0, np.int64)
    group = np.searchsorted(first, np.arange(len(ranked)), side="right") - 1
    occurrence = np.empty(len(every), dtype=np.int64)
    occurrence[order] = np.arange(len(ranked)) - first[group]
    keep = occurrence >= owed[every]
    bounds = np.cumsum([0] + [len(u) for u in units])
    rest = [u[keep[bounds[i] : bounds[i + 1]]] for i, u in enumerate(units)]
    return [u for u in rest if len(u)]


def plan_eval(
    catalog: Catalog,
    *,
    max_per_set: int,
    world_size: int,
    num_workers: int,
    batch_size: int,
) -> EpochPlan:
    """The first `max_per_set` clips of each set (manifest order), split over ranks and workers,
    sorted by duration into batches; no shuffling, so every evaluation sees the same batches."""
    chosen = []
    for k in range(len(catalog.set_names)):
        gids = catalog.set_gids(k)
        if gids:
            chosen.append(np.concatenate(gids)[:max_per_set] if max_per_set > 0 else np.concatenate(gids))
    every = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
    workers = max(1, num_workers)
    G = world_size * workers
    # clip i to stream i % G: eval sets are small and ranks should finish together
    per_stream = []
    for j in range(G):
        mine = every[j::G]
        shard_ix = catalog.shard_of(mine)
        units = [mine[shard_ix == s] for s in np.unique(shard_ix)]
        per_stream.append(
            stream_blocks(
                catalog, units, shards_per_block=max(1, len(units)), batch_size=batch_size, batch_seconds=0.0, rng=None
            )
        )
    return _finish(per_stream, world_size, workers, 0, [every] if len(every) else [])


def _finish(per_stream, world_size, workers, epoch, units) -> EpochPlan:
    by_rank = [[per_stream[r * workers + w] for w in range(workers)] for r in range(world_size)]
    real = [sum(len(b.batches) for blocks in ws for b in blocks) for ws in by_rank]
    steps = max(real) if real else 0
    for ws in by_rank:
        assign_steps(ws, steps)
    pad_gid = int(units[0][0]) if units else -1
    return EpochPlan(epoch, steps, by_rank, real, pad_gid)
