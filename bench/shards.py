"""Shard-writing throughput: the same clips sharded with 1 and 2 workers, in one run.

The clips are espeak-ng WAVs at 22.05 kHz listed in a JSONL manifest, so each clip is decoded,
resampled to 16 kHz, FLAC-encoded, staged and written to a tar: the whole per-clip path.
Also times building the built-in synthetic corpus (synthesis included), the demo's data.

    python bench/shards.py [--clips 480]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without an install

from speechlm.shard import (  # noqa: E402
    OutputConfig,
    ShardRecipe,
    Source,
    SyntheticConfig,
    build,
    synthetic,  # noqa: E402
)


def make_inputs(root: Path, n: int) -> Path:
    cfg = SyntheticConfig(train=n, eval=0, test=0, seed=7)
    rows = []
    for oid, text, (t, voice, speed, pitch) in synthetic.rows(cfg, "train"):
        wav = root / "audio" / f"{oid}.wav"
        wav.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", str(wav), t], check=True)
        rows.append({"audio": str(wav), "text": text, "id": oid})
    (root / "clips.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root / "clips.jsonl"


def timed(recipe, out: Path, workers: int) -> tuple[float, float, dict]:
    """Wall seconds, this process's CPU seconds (all the work when workers=1), manifest."""
    t, c = time.perf_counter(), time.process_time()
    build(recipe, out, workers=workers)
    return time.perf_counter() - t, time.process_time() - c, json.loads((out / "manifest.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clips", type=int, default=480)
    args = ap.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
        f"python {platform.python_version()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        jsonl = make_inputs(tmp / "in", args.clips)
        recipe = ShardRecipe(
            name="bench",
            sources=[Source(name="wav", kind="manifest", id_column="id", splits={"train": [str(jsonl)]})],
            output=OutputConfig(shard_clips=100),
        )
        results = {}
        for workers in (1, 2):
            dt, cpu, man = timed(recipe, tmp / f"out{workers}", workers)
            clips, hours = man["splits"]["train"]["clips"], man["splits"]["train"]["hours"]
            results[workers] = dt
            per_cpu = f"; {clips / cpu:.1f} clips per CPU second" if workers == 1 else ""
            print(
                f"manifest source, {workers} worker(s): {clips} clips ({hours * 3600:.0f} s audio) in {dt:.2f} s"
                f" = {clips / dt:.1f} clips/s, {hours * 3600 / dt:.0f}x real time{per_cpu}"
            )
        same = all((tmp / "out1" / p.name).read_bytes() == p.read_bytes() for p in (tmp / "out2").glob("*.tar"))
        print(f"speedup 2 vs 1 worker: {results[1] / results[2]:.2f}x; byte-identical outputs: {same}")
        syn = ShardRecipe(
            name="synthetic", sources=[Source(name="synthetic", kind="synthetic")], output=OutputConfig(shard_clips=100)
        )
        dt, _, man = timed(syn, tmp / "synthetic", 2)
        n = sum(s["clips"] for s in man["splits"].values())
        print(f"synthetic corpus (espeak-ng + shard), 2 workers: {n} clips in {dt:.2f} s = {n / dt:.1f} clips/s")


if __name__ == "__main__":
    main()
