"""Reader throughput and padding: speechlm.data (WebDataset shards, plan, bucketing) against the
seed's way (a `datasets` map-mode dataset of the same FLAC clips, random batches through a torch
DataLoader), with the same decoding (speechlm.audio) and the same Collator (features + tokens).

    python bench/reader.py [--clips 480] [--batch 16] [--workers 1] [--repeats 2]
    python bench/reader.py --augment [--recipe production] [--override data.augment.speed.prob=0]
    python bench/reader.py --only-reader [--durations uniform] [--clips 240]

Reports clips per CPU second into ready batches (the work runs in-process, torch on one thread, so
this is per core and robust on a shared machine), the padding share of audio frames and text
tokens in both, and how long planning a large manifest takes. With --augment: clips per CPU second
of the same reader with the recipe's `data.augment` on and off, interleaved runs, best of N. With
--only-reader: speechlm's reader alone (best of N per duration kind), ending with a `BENCH {json}`
line of clips per CPU second (what bench/before_after.py reads).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without install
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from speechlm import audio, text  # noqa: E402
from speechlm import config as C  # noqa: E402
from speechlm.config import Config, DataSet  # noqa: E402
from speechlm.data import Collator, TrainLoader  # noqa: E402
from speechlm.data.augment import Augmenter  # noqa: E402
from speechlm.data.catalog import load_catalog  # noqa: E402
from speechlm.data.epoch_plan import plan_epoch  # noqa: E402
from speechlm.model import tiny  # noqa: E402
from speechlm.model.encoders import family_for  # noqa: E402

WORDS = "the cat sat on a mat and dog ran in park with ball she said that he would come back later".split()


def durations(kind: str, n: int, rng) -> np.ndarray:
    if kind == "uniform":  # read speech cut into 1-16 s utterances
        return rng.uniform(1.0, 16.0, n)
    # long tail, as in a mix of short prompted clips and long read speech: median 4 s, 19 s cap
    return np.clip(rng.lognormal(np.log(4.0), 0.7, n), 0.5, 19.0)


def make_clips(n: int, kind: str = "uniform", seed: int = 0):
    """Noise clips with transcripts of ~2.5 words/s."""
    rng = np.random.default_rng(seed)
    out = []
    for i, d in enumerate(durations(kind, n, rng)):
        dur = round(float(d), 3)
        wave = (0.05 * rng.standard_normal(int(dur * 16000))).astype(np.float32)
        words = " ".join(rng.choice(WORDS, size=max(1, int(dur * 2.5))))
        out.append((f"bench.{i:06d}", audio.encode_flac(wave), words, dur))
    return out


def write_shards(clips, root: Path, per_shard: int) -> Path:
    out = root / "bench"
    out.mkdir(parents=True)
    shards = []
    for s in range(0, len(clips), per_shard):
        part = clips[s : s + per_shard]
        file = f"bench-train-{s // per_shard:06d}.tar"
        with tarfile.open(out / file, "w") as tar:
            for cid, flac, words, dur in part:
                meta = json.dumps(
                    {"id": cid, "text": words, "duration": dur, "source": "bench", "orig_id": cid}
                ).encode()
                for name, data in ((f"{cid}.flac", flac), (f"{cid}.json", meta)):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        shards.append(
            {
                "file": file,
                "clips": len(part),
                "seconds": sum(c[3] for c in part),
                "ids": [c[0] for c in part],
                "durations": [c[3] for c in part],
            }
        )
    (out / "manifest.json").write_text(json.dumps({"splits": {"train": {"shards": shards}}, "drops": {}}))
    return out


class MapDataset(torch.utils.data.Dataset):
    """The seed's way: random access into an Arrow table of FLAC bytes, decoded per item."""

    def __init__(self, path: str):
        import datasets

        self.ds = datasets.load_from_disk(path)

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        row = self.ds[int(i)]
        return {"id": row["id"], "text": row["text"], "audio": audio.load(row["flac"]), "weight": 1.0}


def padding(batches) -> tuple[float, float]:
    fm = sum(b["feature_mask"].numel() for b in batches)
    am = sum(b["attention_mask"].numel() for b in batches)
    return (
        1 - sum(int(b["feature_mask"].sum()) for b in batches) / fm,
        1 - sum(int(b["attention_mask"].sum()) for b in batches) / am,
    )


def timed(iterable):
    """(CPU seconds of this process, wall seconds, items). With num_workers=0 all the work is in
    this process, so CPU time measures cost per core even on a machine shared with other jobs."""
    c0, t0 = time.process_time(), time.perf_counter()
    items = list(iterable)
    return time.process_time() - c0, time.perf_counter() - t0, items


def run_reader(path, collator, batch, workers, augment=None):
    return timed(
        TrainLoader(
            [DataSet(str(path))],
            collator,
            batch_size=batch,
            num_workers=workers,
            seed=1,
            shuffle_shards_per_block=4,
            augment=augment,
        )
    )


class TimedAugmenter(Augmenter):
    """The real Augmenter, also summing the CPU time spent in it: its share of the same run's time
    is a ratio that a shared machine's drift between runs cannot skew."""

    cpu = 0.0

    def __call__(self, *a):
        c0 = time.process_time()
        out = super().__call__(*a)
        TimedAugmenter.cpu += time.process_time() - c0
        return out


def bench_augment(kind, args, collator):
    """The reader with the recipe's data.augment against the same reader without it."""
    aug_cfg = C.load(Config, args.recipe, None, args.override).data.augment
    augment = TimedAugmenter(aug_cfg, seed=1)
    clips = make_clips(args.clips, kind)
    with tempfile.TemporaryDirectory() as tmp:
        shards = write_shards(clips, Path(tmp), args.per_shard)
        print(
            f"\n[{kind} durations, augmentation of recipe {args.recipe!r}: {', '.join(aug_cfg.active()) or 'none'}] "
            f"{len(clips)} clips, {sum(c[3] for c in clips) / 3600:.2f} h, batch {args.batch}, "
            f"{args.workers} worker(s)",
            flush=True,
        )
        best, shares = {}, []
        for rep in range(args.repeats):
            for name, aug in (("plain", None), ("augment", augment)):
                TimedAugmenter.cpu = 0.0
                cpu, wall, batches = run_reader(shards, collator, args.batch, args.workers, aug)
                n = sum(int((b["weight"] > 0).sum()) for b in batches)
                assert n == len(clips), (name, n)
                extra = ""
                if aug is not None:
                    shares.append(TimedAugmenter.cpu / (cpu - TimedAugmenter.cpu))
                    extra = f"; {TimedAugmenter.cpu:.2f} CPU s in the augmenter (+{100 * shares[-1]:.1f}% on the rest)"
                print(
                    f"  {name:8s} run {rep}: {cpu:6.2f} CPU s ({n / cpu:6.1f} clips per CPU s), "
                    f"{wall:6.2f} s wall{extra}",
                    flush=True,
                )
                best[name] = min(best.get(name, cpu), cpu)
    rate = {k: len(clips) / v for k, v in best.items()}
    print(
        f"  best of {args.repeats}: plain {rate['plain']:.1f}, augment {rate['augment']:.1f} clips per CPU s: "
        f"+{100 * (best['augment'] / best['plain'] - 1):.1f}% CPU per clip; in-run share of the augmenter: "
        f"+{100 * float(np.median(shares)):.1f}% (median)",
        flush=True,
    )


def bench_reader_only(kind, args, collator) -> float:
    """Clips per CPU second of speechlm's reader alone, best of --repeats."""
    clips = make_clips(args.clips, kind)
    with tempfile.TemporaryDirectory() as tmp:
        shards = write_shards(clips, Path(tmp), args.per_shard)
        best = float("inf")
        for _ in range(args.repeats):
            cpu, _, batches = run_reader(shards, collator, args.batch, args.workers)
            n = sum(int((b["weight"] > 0).sum()) for b in batches)
            assert n == len(clips), n
            best = min(best, cpu)
    print(f"[{kind} durations] reader: {len(clips) / best:.1f} clips per CPU second", flush=True)
    return len(clips) / best


def run_map(path, collator, batch, workers):
    return timed(
        torch.utils.data.DataLoader(
            MapDataset(path),
            batch_size=batch,
            shuffle=True,
            num_workers=workers,
            collate_fn=collator,
            generator=torch.Generator().manual_seed(1),
        )
    )


def bench_one(kind, args, collator, datasets):
    clips = make_clips(args.clips, kind)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shards = write_shards(clips, root, args.per_shard)
        datasets.Dataset.from_dict(
            {"id": [c[0] for c in clips], "flac": [c[1] for c in clips], "text": [c[2] for c in clips]}
        ).save_to_disk(str(root / "arrow"))
        hours = sum(c[3] for c in clips) / 3600
        print(
            f"\n[{kind} durations] {len(clips)} clips, {hours:.2f} h, {args.per_shard} clips/shard, "
            f"batch {args.batch}, {args.workers} worker(s), torch threads {torch.get_num_threads()}",
            flush=True,
        )
        best = {}
        for rep in range(args.repeats):  # interleaved, best of N: the machine is shared
            for name, fn, path in (("reader", run_reader, shards), ("map", run_map, str(root / "arrow"))):
                cpu, wall, batches = fn(path, collator, args.batch, args.workers)
                n = sum(int((b["weight"] > 0).sum()) for b in batches)
                assert n == len(clips), (name, n)
                print(
                    f"  {name:6s} run {rep}: {cpu:6.2f} CPU s ({n / cpu:6.1f} clips per CPU s), {wall:6.2f} s wall",
                    flush=True,
                )
                if name not in best or cpu < best[name][0]:
                    best[name] = (cpu, padding(batches), len(batches))
    rate = {k: len(clips) / v[0] for k, v in best.items()}
    for k in ("reader", "map"):
        _, (pa, pt), nb = best[k]
        print(
            f"  {k:6s} {rate[k]:6.1f} clips per CPU second; {nb} batches; padding: audio frames "
            f"{100 * pa:.1f}%, text tokens {100 * pt:.1f}%"
        )
    print(f"  speed-up per core: {rate['reader'] / rate['map']:.2f}x", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--clips", type=int, default=480)
    ap.add_argument("--per-shard", type=int, default=120)
    ap.add_argument("--durations", default="uniform,longtail")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--workers", type=int, default=0, help="0: measure CPU time in-process (per core)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--plan-clips", type=int, default=1_000_000)
    ap.add_argument("--augment", action="store_true", help="only: the reader with and without data.augment")
    ap.add_argument("--only-reader", action="store_true", help="only speechlm's reader; a BENCH json line at the end")
    ap.add_argument("--recipe", default="production", help="whose data.augment --augment measures")
    ap.add_argument(
        "--override", nargs="*", default=[], help="key=value on that recipe, e.g. data.augment.speed.prob=0"
    )
    args = ap.parse_args(argv)
    import datasets

    tok = text.load_tokenizer(str(tiny.ensure("qwen3_5")), "<audio>")
    collator = Collator(
        tok,
        prompt="Transcribe the audio.",
        audio_token="<audio>",
        family=family_for("tiny/granite_speech5"),
        pool_stride=1,
    )
    if args.augment:
        for kind in args.durations.split(","):
            bench_augment(kind, args, collator)
        return
    if args.only_reader:
        rates = {kind: bench_reader_only(kind, args, collator) for kind in args.durations.split(",")}
        print("BENCH " + json.dumps({"clips_per_cpu_s": rates}), flush=True)
        return
    for kind in args.durations.split(","):
        bench_one(kind, args, collator, datasets)

    # planning cost from a manifest alone (pitfall 8): steps_per_epoch for a large corpus
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(0)
        n, per = args.plan_clips, 1000
        shards = [
            {
                "file": f"x-{s:06d}.tar",
                "ids": [f"x{s}.{i}" for i in range(per)],
                "durations": np.round(rng.uniform(1, 19, per), 2).tolist(),
            }
            for s in range(n // per)
        ]
        Path(tmp, "manifest.json").write_text(json.dumps({"splits": {"train": {"shards": shards}}}))
        t0 = time.perf_counter()
        cat = load_catalog([tmp], ["train"])
        t1 = time.perf_counter()
        plan = plan_epoch(cat, [1.0], seed=0, epoch=0, world_size=8, num_workers=4, shards_per_block=4, batch_size=64)
        t2 = time.perf_counter()
        print(
            f"\nplan of {n} clips over 8 ranks x 4 workers: manifest {t1 - t0:.2f} s, plan {t2 - t1:.2f} s, "
            f"{plan.steps} steps/epoch, padding batches {8 * plan.steps - sum(plan.real_batches)}"
        )

    # audio padding at production shard sizes, from the plan alone (durations -> padded frames)
    print("\naudio padding from the plan, 100k clips, 1000 clips/shard, 4 shards/block:")
    for kind in args.durations.split(","):
        for batch in (16, 256):
            bucketed, random = plan_padding(kind, batch)
            print(f"  {kind:8s} batch {batch:3d}: bucketed {100 * bucketed:.1f}%, random {100 * random:.1f}%")


def plan_padding(kind: str, batch: int, n: int = 100_000, per: int = 1000) -> tuple[float, float]:
    rng = np.random.default_rng(1)
    durs = np.round(durations(kind, n, rng), 2)
    with tempfile.TemporaryDirectory() as tmp:
        shards = [
            {
                "file": f"x-{s:06d}.tar",
                "ids": [f"x{s}.{i}" for i in range(per)],
                "durations": durs[s * per : (s + 1) * per].tolist(),
            }
            for s in range(n // per)
        ]
        Path(tmp, "manifest.json").write_text(json.dumps({"splits": {"train": {"shards": shards}}}))
        cat = load_catalog([tmp], ["train"])
    plan = plan_epoch(cat, [1.0], seed=0, epoch=0, world_size=2, num_workers=2, shards_per_block=4, batch_size=batch)
    frames = (cat.durations * 50).astype(np.int64)  # encoder input frames: 100 mel frames/s, stacked in pairs

    def pad(batches):
        return 1 - sum(frames[b].sum() for b in batches) / sum(frames[b].max() * len(b) for b in batches)

    bucketed = [b for r in plan.workers for w in r for blk in w for b in blk.batches if b is not None]
    perm = rng.permutation(n)
    return pad(bucketed), pad([perm[i : i + batch] for i in range(0, n, batch)])


if __name__ == "__main__":
    sys.exit(main())
