"""build(): a first pass over the sources' labels (the listing), then this task's source files, one at a
time: their rows decoded into staged chunks (parallel), cut into tars; then merge -> manifest.

A one-machine build is task 0 of 1 followed by the merge; a build split across machines runs the
same code as task i of N (each reads only its source files) and `merge` once all are done, so
the two give the same bytes. Peak disk: the finished tars plus one file's working set (the
fetched file and its staged chunks, with the next file prefetched).
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import random
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

from speechlm.config import ConfigError
from speechlm.fsutil import atomic_write, locked_dir
from speechlm.shard import hfstream, listing, sources, writer
from speechlm.shard.merge import DROP_REPORT, INPUTS, STAGE, TAR_NAME, merge
from speechlm.shard.recasing import TRUECASER
from speechlm.shard.schema import SHARD_RECIPES, ShardRecipe, fingerprint, load_recipe, recipe_dict

log = logging.getLogger("speechlm.shard")


def _recipe(recipe: str | Path | ShardRecipe, overrides) -> tuple[ShardRecipe, Path]:
    """(the recipe, the folder its relative paths start from) of a name, a path or a recipe object."""
    if isinstance(recipe, ShardRecipe):
        if recipe.name is None:
            raise ConfigError("name: a recipe passed as an object needs a name")
        recipe.validate()
        return recipe, SHARD_RECIPES
    cfg, path = load_recipe(recipe, overrides)
    return cfg, path.parent


def _check_tasks(num_tasks: int, task_index: int, overwrite: bool) -> None:
    if num_tasks < 1:
        raise ConfigError(f"--num-tasks: must be >= 1, got {num_tasks}")
    if not 0 <= task_index < num_tasks:
        raise ConfigError(f"--task-index: must be in 0..{num_tasks - 1}, got {task_index}")
    if overwrite and num_tasks > 1:
        raise ConfigError(
            "--overwrite: not with --num-tasks (a task would delete the others' work); "
            "empty the output folder once before the tasks start"
        )


def build(
    recipe: str | Path | ShardRecipe,
    out_dir: str | Path | None = None,
    workers: int | None = None,
    overrides: list[str] | tuple = (),
    overwrite: bool = False,
    num_tasks: int = 1,
    task_index: int = 0,
) -> Path:
    """Build (or finish, or confirm up to date) a shard set, or task `task_index` of `num_tasks`
    of it (then `merge(out)` once every task is done); returns its folder."""
    cfg, recipe_dir = _recipe(recipe, overrides)
    _check_tasks(num_tasks, task_index, overwrite)
    out = Path(out_dir or cfg.output.root or recipe_dir / cfg.name)
    workers = workers or cfg.workers or os.cpu_count() or 1
    fp, digests = fingerprint(cfg), input_digests(cfg)
    stage = out / STAGE
    out.mkdir(parents=True, exist_ok=True)
    # the N tasks of a split build start together: one at a time checks the folder and stamps the stage,
    # else a task could read another's half-written stamps as a foreign build (CI saw it: exit 2)
    with locked_dir(out):
        if _up_to_date(out, fp, digests, overwrite, num_tasks):
            log.info("%s is up to date (%s)", out, fp[:12])
            return out
        stage.mkdir(exist_ok=True)
        atomic_write(stage / INPUTS, json.dumps(digests, sort_keys=True).encode())
        atomic_write(stage / "recipe.json", json.dumps(recipe_dict(cfg), sort_keys=True).encode())
        atomic_write(stage / "fingerprint", fp.encode())  # last: a killed task leaves no stamp without its inputs

    listed = listing.prepare(cfg, out, stage)
    mine = listing.assign(listed["units"], num_tasks)[task_index]
    _run_units(cfg, [listed["units"][i] for i in mine], stage, workers)
    if num_tasks == 1:
        return merge(out)
    log.info(
        "task %d of %d done (%d source files); once every task is: python -m speechlm.shard merge %s",
        task_index,
        num_tasks,
        len(mine),
        out,
    )
    return out


def input_digests(cfg: ShardRecipe) -> dict:
    """source -> {input: digest} of what the build reads besides the recipe (SourceType.inputs)."""
    out = {}
    for i, src in enumerate(cfg.sources):
        got = sources.of(src).inputs(src, f"sources[{i}]")
        if got:
            out[src.name] = got
    return out


def changed_inputs(old: dict | None, new: dict) -> list[str]:
    """What differs between two input records, in words ("mine: train.csv changed")."""
    if old is None:
        return [f"{s}: no record of its inputs (built by an older speechlm)" for s in new]
    out = []
    for s in sorted(set(old) | set(new)):
        a, b = old.get(s, {}), new.get(s, {})
        for name in sorted(set(a) | set(b)):
            if name not in a:
                out.append(f"{s}: {name} is new")
            elif name not in b:
                out.append(f"{s}: {name} is no longer read")
            elif a[name] != b[name]:
                out.append(f"{s}: {name} changed")
    return out


def _up_to_date(out: Path, fp: str, digests: dict, overwrite: bool, num_tasks: int = 1) -> bool:
    """True when `out` already holds this build; False to build or resume; raises on a foreign set.
    A set (or an unfinished build) of this recipe from other inputs is rebuilt, saying what changed."""
    man, stage_fp = out / "manifest.json", out / STAGE / "fingerprint"
    old = json.loads(man.read_text()) if man.is_file() else None
    staged = stage_fp.read_text() if stage_fp.is_file() else None
    ours = [p for p in out.iterdir() if TAR_NAME.match(p.name)] if out.is_dir() else []
    if overwrite:
        log.info("overwriting the shard set in %s", out)
        _clear(out, ours)
        return False
    if old is not None and old.get("fingerprint") == fp:
        changed = changed_inputs(old.get("inputs"), digests)
        if not changed:
            files = [s["file"] for sp in old["splits"].values() for s in sp["shards"]]
            return all((out / f).is_file() for f in files)  # else rebuild the missing ones
        log.warning("%s: its inputs changed (%s); rebuilding it", out, "; ".join(changed))
        _clear(out, ours)
        return False
    if old is None:
        staged_inputs = out / STAGE / INPUTS
        before = json.loads(staged_inputs.read_text()) if staged_inputs.is_file() else {}
        if (staged == fp and before == digests) or (staged is None and not ours):
            return False  # resume a killed build, or a fresh one
        if not ours and num_tasks == 1:  # an unfinished build, nothing merged: nothing final is lost
            why = changed_inputs(before, digests) if staged == fp else ["the recipe or its settings changed"]
            log.warning("%s: restarting an unfinished build (%s)", out, "; ".join(why))
            _clear(out, ours)
            return False
    raise ConfigError(
        f"{out} holds shards of another recipe or other settings; "
        "pass --overwrite to replace them or --out to build elsewhere"
    )


def _clear(out: Path, tars: list[Path]) -> None:
    per_language = sorted(out.glob("truecaser.*.model"))  # speechlm.shard.recasing
    for p in tars + [out / "manifest.json", out / TRUECASER, out / DROP_REPORT, *per_language]:
        p.unlink(missing_ok=True)
    shutil.rmtree(out / STAGE, ignore_errors=True)


def _pool(n: int):
    # forkserver: workers fork from a clean server process, not from this one, which may hold
    # threads (tqdm, datasets) that a plain fork would copy mid-lock; cheaper than spawn
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["speechlm.shard.writer"])
    return ctx.Pool(n)


def _run(tasks: list, fn, pool, bar=None) -> list:
    """fn over tasks in the pool (in this process without one), results in task order."""
    results = [None] * len(tasks)
    items = enumerate(tasks)
    for i, r in pool.imap_unordered(_Indexed(fn), items) if pool else map(_Indexed(fn), items):
        results[i] = r
        if bar is not None:
            bar.update(len(tasks[i]["rows"]))
    return results


class _Indexed:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, item):
        i, task = item
        return i, self.fn(task)


def _done_path(stage: Path, unit: dict) -> Path:
    return stage / "done" / f"{unit['name']}.json"


def _local_file(unit: dict, stage: Path) -> str | None:
    """The parquet file a streamed unit's workers read: in place when local, else fetched."""
    if unit["file"] is None:
        return None
    if hfstream.is_local(unit["file"]):
        return unit["file"].removeprefix("file://")
    local = hfstream.fetch(unit["file"], stage / "fetch" / f"{unit['name']}.parquet")
    log.info("fetched %s (%.1f MB)", unit["file"], local.stat().st_size / 1e6)
    return str(local)


def _run_units(cfg: ShardRecipe, units: list[dict], stage: Path, workers: int) -> None:
    todo = [u for u in units if not _done_path(stage, u).is_file()]
    chunks = sum(u["n_chunks"] for u in todo)
    staged = len(list((stage / "chunks").glob("*.json"))) if (stage / "chunks").is_dir() else 0
    if len(todo) < len(units) or staged:
        log.info(
            "resuming: %d of %d source files done, %d of %d chunks of the rest already staged",
            len(units) - len(todo),
            len(units),
            staged,
            chunks,
        )
    by_name = {s.name: s for s in cfg.sources}
    most = max((u["n_chunks"] for u in todo), default=0)
    pool = _pool(min(workers, most)) if workers > 1 and most > 1 else None
    fetcher = ThreadPoolExecutor(1)  # fetches the next file while this one is decoded
    rows = sum(u["rows"] for u in todo)
    try:
        with tqdm(total=rows, unit="clips", desc="shard clips", dynamic_ncols=True) as bar:
            ahead = {}
            for k, unit in enumerate(todo):
                for j in (k, k + 1):
                    if j < len(todo) and j not in ahead:
                        ahead[j] = fetcher.submit(_local_file, todo[j], stage)
                local = ahead.pop(k).result()
                _run_unit(
                    cfg,
                    by_name[unit["source"]],
                    dict(unit, chunks=listing.load_chunks(stage, unit)),
                    local,
                    stage,
                    pool,
                    bar,
                )
                if local and (stage / "fetch") in Path(local).parents:
                    Path(local).unlink()
    finally:
        fetcher.shutdown(wait=True, cancel_futures=True)
        if pool is not None:
            pool.terminate()
            pool.join()


def _chunk_tasks(cfg: ShardRecipe, src, unit: dict, local: str | None, stage: Path) -> list[dict]:
    """One decode task per chunk of a source file's rows, each with its staged meta and blob files."""
    tasks = []
    for c, chunk in enumerate(unit["chunks"]):
        stem = stage / "chunks" / f"{unit['name']}-{c:06d}"
        tasks.append(
            {
                "source": src,
                "file": local,
                "groups": chunk["groups"],
                "first": chunk["first"],
                "rows": chunk["rows"],
                "meta": f"{stem}.json",
                "blob": f"{stem}.bin",
                "min_seconds": cfg.normalize.min_seconds,
                "max_seconds": cfg.normalize.max_seconds,
            }
        )
    return tasks


def _decoded(src, unit: dict, tasks: list[dict], metas: list[dict]) -> tuple[dict, list, list]:
    """(drops by reason, the clips decoded, the drop report's rows) of a source file's decode tasks."""
    drops: dict = {}
    clips, dropped = [], []
    for task, meta in zip(tasks, metas):
        for reason, n in meta["drops"].items():
            drops[reason] = drops.get(reason, 0) + n
        for err in meta["errors"]:
            log.warning("%s/%s: skipped audio: %s", src.name, unit["split"], err)
        dropped += [[src.name, unit["split"], *row] for row in meta.get("dropped", [])]  # oid, file, reason, detail
        clips += [dict(c, blob=task["blob"]) for c in meta["clips"]]
    return drops, clips, dropped


def _language_lists(clips: list[dict]) -> dict:
    """A shard's clips' languages and tasks, in clip order, when any clip states one (the manifest
    counts hours by them and the reader's mix weights by them); {} otherwise."""
    labels = [c.get("labels") or {} for c in clips]
    if not any("language" in x or "task" in x for x in labels):
        return {}
    return {"languages": [x.get("language") for x in labels], "tasks": [x.get("task", "transcribe") for x in labels]}


def _run_unit(cfg: ShardRecipe, src, unit: dict, local: str | None, stage: Path, pool, bar) -> None:
    """Decode one source file's rows into staged chunks, cut them into part tars, record it done."""
    (stage / "chunks").mkdir(exist_ok=True)
    (stage / "parts").mkdir(exist_ok=True)
    tasks = _chunk_tasks(cfg, src, unit, local, stage)
    metas = _run(tasks, writer.process_chunk, pool, bar)
    drops, clips, dropped = _decoded(src, unit, tasks, metas)
    # the write-time shuffle: seeded per source file, whatever the worker or task count
    random.Random(f"{cfg.output.seed}-{unit['name']}").shuffle(clips)
    shards = writer.plan_shards(clips, src.name, cfg.output.shard_clips, cfg.output.shard_bytes)
    parts = [
        {"path": str(stage / "parts" / f"{unit['name']}-{j:05d}.tar"), "source": src.name, "clips": shard}
        for j, shard in enumerate(shards)
    ]
    _run(parts, writer.write_shard, pool)
    done = {
        "drops": drops,
        "dropped": dropped,
        "shards": [
            {
                "part": Path(p["path"]).name,
                "ids": [c["id"] for c in p["clips"]],
                "durations": [c["duration"] for c in p["clips"]],
                **_language_lists(p["clips"]),
            }
            for p in parts
        ],
    }
    _done_path(stage, unit).parent.mkdir(exist_ok=True)
    atomic_write(_done_path(stage, unit), json.dumps(done, sort_keys=True).encode())
    for task in tasks:  # the working set goes once the file's tars are written
        Path(task["blob"]).unlink(missing_ok=True)
        Path(task["meta"]).unlink(missing_ok=True)
