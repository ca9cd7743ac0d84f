"""Streaming vs map-mode ingestion of an hf parquet source: peak disk, wall time, clips/s.

Makes a parquet dataset here, laid out as the Hub stores one (data/train-0000k-of-0000N.parquet,
an `audio` column of {bytes, path} cells holding real 16 kHz WAV files, datasets' feature
metadata, row groups of 100 rows), then shards it twice from the same folder: `stream: true`
(file by file, no copy) and `stream: false` (load_dataset: an Arrow copy in the cache first).
Peak disk counts what the build writes (shards, stage, datasets cache), sampled every 0.2 s; the
source folder itself is the same for both and is reported separately.

    python bench/stream_vs_map.py [--gb 2.0] [--workers 2] [--root DIR] [--keep]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without an install

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import soundfile as sf  # noqa: E402

from speechlm.shard import NormalizeConfig, OutputConfig, ShardRecipe, Source, build  # noqa: E402

SR, SECONDS, PER_FILE = 16000, 12.0, 640
WORDS = "the a cat dog sat ran on under over big small red blue house tree river stone light".split()
FEATURES = {
    "info": {
        "features": {
            "audio": {"_type": "Audio"},
            "text": {"dtype": "string", "_type": "Value"},
            "id": {"dtype": "string", "_type": "Value"},
        }
    }
}


_TONES: list = []


def clip(rng: np.random.Generator) -> bytes:
    """A 10-12 s WAV: one of 16 three-tone chords plus fresh noise (so no two clips are alike)."""
    if not _TONES:
        t = np.arange(int(SR * SECONDS)) / SR
        _TONES.extend(
            (3000 * sum(np.sin(2 * np.pi * rng.uniform(100, 2000) * t) for _ in range(3))).astype(np.int16)
            for _ in range(16)
        )
    n = int(SR * rng.uniform(SECONDS - 2, SECONDS))
    wave = _TONES[rng.integers(16)][:n] + rng.integers(-1500, 1500, n, dtype=np.int16)
    buf = io.BytesIO()
    sf.write(buf, wave, SR, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def make_dataset(root: Path, gb: float) -> tuple[int, int]:
    rng = np.random.default_rng(0)
    per_clip = len(clip(rng))
    files = max(1, round(gb * 1e9 / (per_clip * PER_FILE)))
    schema = pa.schema(
        [
            ("audio", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
            ("text", pa.string()),
            ("id", pa.string()),
        ],
        metadata={"huggingface": json.dumps(FEATURES)},
    )
    (root / "data").mkdir(parents=True, exist_ok=True)
    n = 0
    for f in range(files):
        ids = [f"clip{n + i:06d}" for i in range(PER_FILE)]
        table = pa.table(
            {
                "audio": [{"bytes": clip(rng), "path": f"{i}.wav"} for i in ids],
                "text": [" ".join(rng.choice(WORDS, 8)).capitalize() + "." for _ in ids],
                "id": ids,
            },
            schema=schema,
        )
        pq.write_table(table, root / "data" / f"train-{f:05d}-of-{files:05d}.parquet", row_group_size=100)
        n += PER_FILE
    return n, files


def du(*paths: Path) -> int:
    total = 0
    for p in paths:
        for dirpath, _, names in os.walk(p):
            for name in names:
                try:
                    total += os.lstat(os.path.join(dirpath, name)).st_size
                except FileNotFoundError:
                    pass
    return total


def measure(src_dir: Path, work: Path, stream: bool, workers: int) -> dict:
    out, cache = work / "shards", work / "hf_cache"
    recipe = ShardRecipe(
        name="bench",
        sources=[
            Source(
                name="pq",
                kind="hf",
                path=str(src_dir),
                splits={"train": ["train"]},
                id_column="id",
                stream=stream,
                cache_dir=str(cache),
            )
        ],
        normalize=NormalizeConfig(truecase=False, max_seconds=19.0),
        output=OutputConfig(shard_clips=500),
    )
    peak, stop = [0], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], du(out, cache))
            time.sleep(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    t0 = time.perf_counter()
    build(recipe, out, workers=workers)
    wall = time.perf_counter() - t0
    stop.set()
    th.join()
    man = json.loads((out / "manifest.json").read_text())
    clips = man["splits"]["train"]["clips"]
    return {
        "mode": "stream" if stream else "map",
        "clips": clips,
        "wall_s": round(wall, 1),
        "clips_per_s": round(clips / wall, 1),
        "peak_disk_gb": round(peak[0] / 1e9, 2),
        "shards_gb": round(du(out) / 1e9, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--root", default="/work/tmp-bench-stream")
    ap.add_argument("--keep", action="store_true", help="keep the generated dataset")
    args = ap.parse_args()
    root = Path(args.root)
    shutil.rmtree(root, ignore_errors=True)
    try:
        t0 = time.perf_counter()
        n, files = make_dataset(root / "src", args.gb)
        print(
            f"dataset: {n} clips in {files} parquet files, {du(root / 'src') / 1e9:.2f} GB "
            f"(made in {time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; workers {args.workers}")
        for stream in (True, False):
            work = root / ("stream" if stream else "map")
            print(json.dumps(measure(root / "src", work, stream, args.workers)), flush=True)
            shutil.rmtree(work)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
