"""Reader throughput from a local S3-compatible server (moto) vs local disk, same shards, same plan.

    python bench/remote.py [--clips 480] [--per-shard 60] [--workers 0,2] [--repeats 3]

Writes the shards of bench/reader.py (noise FLAC clips of 1-16 s with transcripts), uploads them to
moto's S3 server on 127.0.0.1 and reads one epoch through `TrainLoader` from each place: local disk,
s3:// streamed, s3:// through the cache (cold: the epoch fills it; warm: a second epoch reads it).
The collator only counts what the reader hands over (clips come decoded), so the figure is the
reader's I/O + FLAC decoding, not feature extraction. Wall clips/s and clips per CPU second of the
reader (this process and its DataLoader workers; the server's CPU is not counted), best of the
interleaved repeats.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]  # run from a checkout without install; bench/reader.py

from reader import make_clips, write_shards  # noqa: E402

from speechlm.config import DataSet  # noqa: E402
from speechlm.data import TrainLoader  # noqa: E402
from speechlm.data.remote import RemoteIO  # noqa: E402


def count(samples: list[dict]) -> dict:
    """A collator that keeps only counts (module level: it pickles into the workers)."""
    return {
        "clips": sum(1 for s in samples if s["weight"] > 0),
        "seconds": sum(len(s["audio"]) for s in samples) / 16000,
    }


def _cpu() -> float:
    """CPU seconds of this process and its joined children (the DataLoader workers of finished
    epochs; the S3 server runs until the end, so it is not counted)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def epoch(path: str, workers: int, io_: RemoteIO) -> tuple[float, float, int, float]:
    """(wall s, reader CPU s, clips, audio s) of one epoch."""
    t0, c0 = time.perf_counter(), _cpu()
    ld = TrainLoader(
        [DataSet(path)], count, batch_size=16, num_workers=workers, seed=1, shuffle_shards_per_block=2, remote_io=io_
    )
    clips = seconds = 0
    for b in ld:
        clips += b["clips"]
        seconds += b["seconds"]
    return time.perf_counter() - t0, _cpu() - c0, clips, seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clips", type=int, default=480)
    ap.add_argument("--per-shard", type=int, default=60)
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    # the server in a process of its own, so it does not compete with the reader for one GIL
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):  # up to 30 s
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
    )
    import s3fs

    try:
        run(args, port, s3fs)
    finally:
        server.terminate()
        server.wait(30)
    return 0


def run(args, port: int, s3fs) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        local = write_shards(make_clips(args.clips), root, args.per_shard)
        size = sum(f.stat().st_size for f in local.glob("*.tar"))
        fs = s3fs.S3FileSystem()
        fs.mkdir("bench")
        fs.put(str(local), "bench/set", recursive=True)
        url = "s3://bench/set"
        print(
            f"{args.clips} clips in {len(list(local.glob('*.tar')))} shards, {size / 2**20:.1f} MiB; "
            f"moto S3 on 127.0.0.1:{port}"
        )
        stream = RemoteIO()
        cache = root / "cache"
        cached = RemoteIO(cache_dir=str(cache), cache_bytes=10 * 2**30)
        best: dict[tuple, float] = {}
        for rep in range(args.repeats):
            for w in (int(x) for x in args.workers.split(",")):
                shutil.rmtree(cache, ignore_errors=True)
                runs = [
                    ("local disk", str(local), stream),
                    ("s3 streamed", url, stream),
                    ("s3 cache, cold", url, cached),
                    ("s3 cache, warm", url, cached),
                ]
                for name, path, io_ in runs:
                    wall, cpu, clips, seconds = epoch(path, w, io_)
                    assert clips == args.clips, (name, clips)
                    print(
                        f"  run {rep} workers {w} {name:15s}: {wall:6.2f} s, {clips / wall:7.1f} clips/s, "
                        f"{seconds / wall:7.1f} audio s/s, {clips / cpu:7.1f} clips per reader CPU s",
                        flush=True,
                    )
                    old = best.get((w, name), (0.0, 0.0))
                    best[(w, name)] = (max(old[0], clips / wall), max(old[1], clips / cpu))
        print("\nbest of the runs: clips/s (wall), clips per reader CPU second")
        for (w, name), (rate, per_cpu) in best.items():
            ref = best[(w, "local disk")]
            print(
                f"  workers {w} {name:15s} {rate:7.1f} ({rate / ref[0]:.2f}x disk)  "
                f"{per_cpu:7.1f} ({per_cpu / ref[1]:.2f}x disk)"
            )


if __name__ == "__main__":
    sys.exit(main())
