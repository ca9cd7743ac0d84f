"""Before and after a refactor: the same measurements on two revisions, in alternating runs.

    python bench/before_after.py --before REV [--after REV] [--rounds 3] [--json FILE]

Each revision is checked out into a temporary `git worktree add --detach` (removed at the end; the
default --after is this working tree as it is, uncommitted changes included). Then, for --rounds
rounds, before and after take turns, the first of a round swapping each round (before, after,
after, before, before, after, ...: a shared machine's drift, even a steady one, hits both alike),
each run a fresh process with its own tree first on PYTHONPATH and as its cwd:

- train step: `bench/train.py --child speechlm` (the speechlm trainer on the tiny twin, batch 8,
  world size 1, CPU), median wall time per step after --warmup steps;
- reader: `bench/reader.py --only-reader` (speechlm's shard reader and Collator on noise clips),
  clips per CPU second (in-process, one torch thread: per core, robust to the machine's load).

Both sides run the AFTER revision's copy of bench/train.py and bench/reader.py (copied into the
before tree, so each script's own path insert still points at its side's tree): the measuring code
is the same and only the package code differs. That needs the before revision's package to offer
what those scripts import; when a refactor moved something they import, --own-scripts runs each
side's own copies instead (they must take the flags used here: --override, --only-reader). The
training data is one small synthetic shard set (espeak-ng) built once with the after tree's code
and read by both sides.

The table gives per measure the median of each side, the ratio after/before and each side's spread
(min-max over its runs). The verdict is "unchanged within noise" when the ratio's distance from 1 is
within the runs' own spread: each side's (max - min) / median, added. Runs in separate processes
differ by several percent on a shared machine even for the same code (docs/benchmarks.md, the same
revision against itself), so two rounds say little; take 3 or more.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ("bench/train.py", "bench/reader.py")
# measure -> (label, unit, which way is better)
MEASURES = {
    "train_step_ms": ("train step, tiny twin, batch 8", "ms", "lower"),
    "reader_clips_per_cpu_s": ("reader, uniform 1-16 s clips", "clips/CPU s", "higher"),
}


def compare(before: list[float], after: list[float]) -> dict:
    """Medians, ratio after/before, spreads and the verdict for one measure's runs."""
    mb, ma = statistics.median(before), statistics.median(after)
    ratio = ma / mb
    # each side's relative spread, added: the most two medians can differ while both ranges still
    # overlap (that is, while the runs cannot tell the sides apart)
    noise = sum((max(v) - min(v)) / statistics.median(v) for v in (before, after))
    if min(len(before), len(after)) < 2:
        verdict = "no spread with one run a side: not judged"
    elif abs(ratio - 1) <= noise:
        verdict = "unchanged within noise"
    else:
        verdict = f"changed: {100 * (ratio - 1):+.1f}% beyond the runs' spread (+-{100 * noise:.1f}%)"
    return {
        "before": before,
        "after": after,
        "median_before": mb,
        "median_after": ma,
        "ratio": ratio,
        "spread_before": [min(before), max(before)],
        "spread_after": [min(after), max(after)],
        "noise": noise,
        "verdict": verdict,
    }


def table(results: dict[str, dict], names: tuple[str, str]) -> str:
    """Markdown table of compare()'s results per measure."""
    b, a = names
    lines = [
        f"| measure | median {b} | median {a} | after/before | spread {b} | spread {a} | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, r in results.items():
        label, unit, better = MEASURES.get(key, (key, "", ""))
        sb, sa = r["spread_before"], r["spread_after"]
        lines.append(
            f"| {label} ({unit}, {better} is better) | {r['median_before']:.1f} | {r['median_after']:.1f} | "
            f"{r['ratio']:.3f} | {sb[0]:.1f}-{sb[1]:.1f} | {sa[0]:.1f}-{sa[1]:.1f} | {r['verdict']} |"
        )
    return "\n".join(lines)


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def label(tree: Path, rev: str | None) -> str:
    head = git("rev-parse", "--short", "HEAD", cwd=tree)
    if rev is None:
        dirty = git("status", "--porcelain", "--untracked-files=no", cwd=tree)
        return f"working tree {head}{' +changes' if dirty else ''}"
    return f"{rev} ({head})" if rev != head else head


def run_bench(tree: Path, cmd: list[str], env: dict) -> dict:
    """One run of a bench script in `tree`; its `BENCH {json}` line."""
    p = subprocess.run(
        [sys.executable, *cmd], cwd=tree, env={**env, "PYTHONPATH": str(tree)}, capture_output=True, text=True
    )
    line = [x for x in p.stdout.splitlines() if x.startswith("BENCH ")]
    if p.returncode or not line:
        hint = (
            " (a module the after copy imports is missing here? see --own-scripts)"
            if "ModuleNotFound" in p.stderr
            else ""
        )
        sys.exit(f"{' '.join(cmd[:1])} failed in {tree}{hint}:\n{p.stderr[-3000:]}")
    return json.loads(line[-1][6:])


def check_imports_from(tree: Path, env: dict) -> None:
    """The run must import speechlm from its own tree, not from an installed copy."""
    code = "import speechlm, sys; print(speechlm.__file__)"
    got = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env={**env, "PYTHONPATH": str(tree)}, capture_output=True, text=True
    ).stdout.strip()
    if not got.startswith(str(tree)):
        sys.exit(f"speechlm in {tree} imports from {got or '(nothing)'}, not from that tree")


def build_shards(tree: Path, out: Path, env: dict, clips: int) -> Path:
    """A small synthetic shard set (the shipped recipe, scaled down) for the train runs of both sides."""
    sizes = [
        f"sources.0.synthetic.{k}={v}" for k, v in (("train", clips), ("eval", 8), ("test", 8), ("unseen_test", 4))
    ]
    cmd = [sys.executable, "-m", "speechlm.shard", "--config", "synthetic", "--out", str(out), "--workers", "1"]
    p = subprocess.run(
        cmd + sizes + ["output.shard_clips=40"],
        cwd=tree,
        env={**env, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
    )
    if p.returncode:
        sys.exit(f"building the synthetic shards failed:\n{p.stderr[-3000:]}")
    return out


def one_side(tree: Path, args, shards: Path, env: dict) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        train = ["bench/train.py", "--child", "speechlm", "--steps", str(args.steps), "--out", out]
        times = run_bench(tree, train + ["--override", f"data.train=[{{path: {shards}, split: train}}]"], env)["times"]
    reader = ["bench/reader.py", "--only-reader", "--durations", "uniform", "--clips", str(args.clips)]
    rate = run_bench(tree, reader + ["--repeats", str(args.reader_repeats)], env)["clips_per_cpu_s"]["uniform"]
    return {"train_step_ms": 1000 * statistics.median(times[args.warmup :]), "reader_clips_per_cpu_s": rate}


def prepare(args, tmp: Path, trees: list[Path]) -> None:
    """The before and after trees into `trees` (as they are added: the caller removes them)."""
    for rev, name in ((args.before, "before"), (args.after, "after")):
        if rev is None:
            trees.append(ROOT)
        else:
            git("worktree", "add", "--detach", str(tmp / name), rev)
            trees.append(tmp / name)
    before, after = trees
    if not args.own_scripts:
        for s in SCRIPTS:
            if (before / s).read_bytes() != (after / s).read_bytes():
                print(f"note: {s} differs between the revisions; both sides run the after copy", flush=True)
            shutil.copyfile(after / s, before / s)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="git revision before the change")
    ap.add_argument("--after", default=None, help="git revision after it (default: this working tree)")
    ap.add_argument("--rounds", type=int, default=3, help="runs per side, alternating")
    ap.add_argument("--steps", type=int, default=25, help="train steps per run")
    ap.add_argument("--warmup", type=int, default=5, help="first steps left out of the median")
    ap.add_argument("--clips", type=int, default=240, help="reader clips per run (also the train shard set's)")
    ap.add_argument("--reader-repeats", type=int, default=2, help="reader passes per run; the best counts")
    ap.add_argument("--own-scripts", action="store_true", help="each side runs its own bench/train.py, reader.py")
    ap.add_argument("--json", default=None, help="write the numbers here")
    args = ap.parse_args(argv)
    if args.steps <= args.warmup:
        ap.error("--steps must exceed --warmup")
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "HF_HUB_OFFLINE": "1"}
    tmp = Path(tempfile.mkdtemp(prefix="before_after-"))
    trees: list[Path] = []
    load = [os.getloadavg()[0]]
    try:
        prepare(args, tmp, trees)
        names = (label(trees[0], args.before), label(trees[1], args.after))
        for tree in trees:
            check_imports_from(tree, env)
        shards = build_shards(trees[1], tmp / "shards" / "synthetic", env, args.clips)
        runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        sides = [("before", trees[0], names[0]), ("after", trees[1], names[1])]
        for r in range(args.rounds):
            for side, tree, name in sides if r % 2 == 0 else sides[::-1]:
                runs[side].append(one_side(tree, args, shards, env))
                print(f"round {r + 1} {name}: {runs[side][-1]}", flush=True)
    finally:
        for tree in trees:
            if tree != ROOT:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
        git("worktree", "prune")
    load.append(os.getloadavg()[0])
    results = {m: compare([x[m] for x in runs["before"]], [x[m] for x in runs["after"]]) for m in MEASURES}
    print(
        f"\n{args.rounds} alternating rounds, OMP_NUM_THREADS={env['OMP_NUM_THREADS']}, "
        f"{os.cpu_count()} CPUs, load average {load[0]:.1f} at the start, {load[1]:.1f} at the end"
    )
    print(table(results, names))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"before": names[0], "after": names[1], "load": load, "results": results}, indent=2)
        )


if __name__ == "__main__":
    main()
