"""build(): sources -> normalized, truecased labels -> staged clips (parallel) -> tars -> manifest."""
from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import random
import re
import shutil
from pathlib import Path

from tqdm import tqdm

from speechlm.config import ConfigError
from speechlm.shard import normalize as N
from speechlm.shard import sources, synthetic, truecase, writer
from speechlm.shard.manifest import build_manifest
from speechlm.shard.schema import SHARD_RECIPES, ShardRecipe, fingerprint, load_recipe

log = logging.getLogger("speechlm.shard")
UNSAFE = re.compile(r"[^A-Za-z0-9_-]")  # a dot would split the WebDataset key
TAR_NAME = re.compile(r"^[A-Za-z0-9_]+-(train|eval|test)-\d{6}\.tar$")
STAGE = ".stage"
TRUECASER = "truecaser.model"


def build(recipe: str | Path | ShardRecipe, out_dir: str | Path | None = None, workers: int | None = None,
          overrides: list[str] | tuple = (), overwrite: bool = False) -> Path:
    """Build (or finish, or confirm up to date) a shard set; returns its folder."""
    if isinstance(recipe, ShardRecipe):
        cfg, recipe_dir = recipe, SHARD_RECIPES
        if cfg.name is None:
            raise ConfigError("name: a recipe passed as an object needs a name")
        cfg.validate()
    else:
        cfg, path = load_recipe(recipe, overrides)
        recipe_dir = path.parent
    out = Path(out_dir or cfg.output.root or recipe_dir / cfg.name)
    workers = workers or cfg.workers or os.cpu_count() or 1
    fp = fingerprint(cfg)
    if _up_to_date(out, fp, overwrite):
        log.info("%s is up to date (%s)", out, fp[:12])
        return out
    stage = out / STAGE
    stage.mkdir(parents=True, exist_ok=True)
    writer.atomic_write(stage / "fingerprint", fp.encode())

    groups, inputs, drops = _list_rows(cfg)
    tc_info, truecased = _truecase(cfg, groups, out)
    chunk_tasks = _chunk_tasks(cfg, groups, stage)
    staged = sum(Path(t["meta"]).is_file() for t in chunk_tasks)
    if staged:
        log.info("resuming: %d of %d chunks already staged", staged, len(chunk_tasks))
    pool = _pool(min(workers, len(chunk_tasks))) if workers > 1 and len(chunk_tasks) > 1 else None
    try:
        metas = _run(chunk_tasks, writer.process_chunk, pool, "clips", weight=lambda t: len(t["rows"]))
        shard_tasks, shard_entries = _plan(cfg, chunk_tasks, metas, drops, out)
        _run(shard_tasks, writer.write_shard, pool, "shards")
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    manifest = build_manifest(cfg, fp, shard_entries, inputs, drops, tc_info, truecased)
    writer.atomic_write(out / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True).encode())
    shutil.rmtree(stage)
    _log_summary(manifest)
    return out


def _up_to_date(out: Path, fp: str, overwrite: bool) -> bool:
    """True when `out` already holds this build; False to build or resume; raises on a foreign set."""
    man, stage_fp = out / "manifest.json", out / STAGE / "fingerprint"
    old = json.loads(man.read_text()) if man.is_file() else None
    staged = stage_fp.read_text() if stage_fp.is_file() else None
    ours = [p for p in out.iterdir() if TAR_NAME.match(p.name)] if out.is_dir() else []
    if not overwrite:
        if old is not None and old.get("fingerprint") == fp:
            files = [s["file"] for sp in old["splits"].values() for s in sp["shards"]]
            return all((out / f).is_file() for f in files)  # else rebuild the missing ones
        if old is None and (staged == fp or (staged is None and not ours)):
            return False  # resume a killed build, or a fresh one
        raise ConfigError(f"{out} holds shards of another recipe or other settings; "
                          "pass --overwrite to replace them or --out to build elsewhere")
    log.info("overwriting the shard set in %s", out)
    for p in ours + [man, out / TRUECASER]:
        p.unlink(missing_ok=True)
    shutil.rmtree(out / STAGE, ignore_errors=True)
    return False


def _count(drops: dict, source: str, split: str, reason: str, n: int = 1) -> None:
    per = drops.setdefault(source, {}).setdefault(split, {})
    per[reason] = per.get(reason, 0) + n


def _list_rows(cfg: ShardRecipe):
    """(source, split) -> [(id, orig_id, normalized text, ref)], input counts, and the early drops."""
    groups, inputs, drops = {}, {}, {}
    for i, src in enumerate(cfg.sources):
        key = f"sources[{i}]"
        if src.kind == "synthetic":
            synthetic.check_espeak(src.synthetic.voices, key)
        for split in sources.source_splits(src):
            rows = sources.list_rows(src, split, key)
            inputs.setdefault(src.name, {})[split] = len(rows)
            drops.setdefault(src.name, {})[split] = {}
            kept, seen = [], set()
            for oid, text, ref in rows:
                cid = f"{src.name}_{UNSAFE.sub('_', str(oid))}"
                if text is None:  # a label whose bytes are not UTF-8
                    _count(drops, src.name, split, N.NOT_UTF8)
                    continue
                text = N.normalize_text(text, cfg.normalize.tags)
                if not text:
                    _count(drops, src.name, split, N.EMPTY_TEXT)
                elif cid in seen:
                    _count(drops, src.name, split, N.DUPLICATE_ID)
                else:
                    seen.add(cid)
                    kept.append((cid, str(oid), text, ref))
            groups[(src.name, split)] = kept
            log.info("%s/%s: %d rows listed", src.name, split, len(rows))
    return groups, inputs, drops


def _truecase(cfg: ShardRecipe, groups: dict, out: Path):
    """Re-case the labels of all-lowercase/all-uppercase sources in place; (manifest info, names)."""
    if not cfg.normalize.truecase:
        return None, []
    labels = {s.name: [r[2] for (name, _), rows in groups.items() if name == s.name for r in rows]
              for s in cfg.sources}
    targets = [s.name for s in cfg.sources
               if s.truecase is True or (s.truecase is None and N.is_uncased(labels[s.name]))]
    if not targets:
        return None, []
    model_path = out / TRUECASER
    # cased labels only; test labels stay out of anything learned
    trained_on = [s.name for s in cfg.sources if s.name not in targets]
    text = [r[2] for (name, split), rows in groups.items()
            if name in trained_on and split != "test" for r in rows]
    if cfg.normalize.truecase_model:
        tc, trained_on = truecase.load(cfg.normalize.truecase_model, model_path), []
        model = str(cfg.normalize.truecase_model)
    elif text:
        tc = truecase.train(text, model_path)
        model = "trained:" + ",".join(trained_on)
    else:  # nothing cased in the recipe: the shipped English model
        tc, trained_on, model = truecase.builtin(model_path), [], truecase.BUILTIN_NAME
    for (name, split), rows in groups.items():
        if name in targets:
            groups[(name, split)] = [(cid, oid, truecase.apply(tc, text), ref) for cid, oid, text, ref in rows]
    sha = truecase.file_sha256(model_path)
    log.info("truecased %s with %s (sha256 %s)", ", ".join(targets), model, sha[:12])
    info = {"file": TRUECASER, "sha256": sha, "trained_on": trained_on, "model": model, "applied_to": targets}
    if model == truecase.BUILTIN_NAME:
        info["about"] = truecase.BUILTIN_ABOUT
    return info, targets


def _chunk_tasks(cfg: ShardRecipe, groups: dict, stage: Path) -> list[dict]:
    by_name = {s.name: s for s in cfg.sources}
    tasks = []
    for (name, split), rows in groups.items():
        rows = list(rows)
        # the write-time shuffle: seeded per (source, split), independent of the worker count
        random.Random(f"{cfg.output.seed}-{name}-{split}").shuffle(rows)
        step = cfg.output.work_chunk
        for k in range(0, len(rows), step):
            stem = stage / f"{name}-{split}-{k // step:06d}"
            tasks.append({"source": by_name[name], "split": split, "rows": rows[k:k + step],
                          "meta": f"{stem}.json", "blob": f"{stem}.bin",
                          "min_seconds": cfg.normalize.min_seconds, "max_seconds": cfg.normalize.max_seconds})
    return tasks


def _pool(n: int):
    # forkserver: workers fork from a clean server process, not from this one, which may hold
    # threads (tqdm, datasets) that a plain fork would copy mid-lock; cheaper than spawn
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["speechlm.shard.writer"])
    return ctx.Pool(n)


def _run(tasks: list, fn, pool, unit: str, weight=lambda t: 1) -> list:
    """fn over tasks in the pool (in this process without one), results in task order, with a bar."""
    results = [None] * len(tasks)
    with tqdm(total=sum(weight(t) for t in tasks), unit=unit, desc=f"shard {unit}", dynamic_ncols=True) as bar:
        items = enumerate(tasks)
        for i, r in (pool.imap_unordered(_Indexed(fn), items) if pool else map(_Indexed(fn), items)):
            results[i] = r
            bar.update(weight(tasks[i]))
    return results


class _Indexed:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, item):
        i, task = item
        return i, self.fn(task)


def _plan(cfg: ShardRecipe, chunk_tasks: list, metas: list, drops: dict, out: Path):
    """Shard tasks and manifest entries from the staged chunks; adds the workers' drops."""
    per_group: dict = {}
    for task, meta in zip(chunk_tasks, metas):
        name, split = task["source"].name, task["split"]
        for reason, n in meta["drops"].items():
            _count(drops, name, split, reason, n)
        for err in meta["errors"]:
            log.warning("%s/%s: skipped undecodable audio: %s", name, split, err)
        per_group.setdefault((name, split), []).extend(dict(c, blob=task["blob"]) for c in meta["clips"])
    tasks, entries = [], []
    for (name, split), clips in per_group.items():
        for k, shard in enumerate(writer.plan_shards(clips, name, cfg.output.shard_clips, cfg.output.shard_bytes)):
            file = f"{name}-{split}-{k:06d}.tar"
            tasks.append({"path": str(out / file), "source": name, "clips": shard})
            entries.append({"file": file, "source": name, "split": split,
                            "ids": [c["id"] for c in shard], "durations": [c["duration"] for c in shard]})
    return tasks, entries


def _log_summary(manifest: dict) -> None:
    for split, sp in manifest["splits"].items():
        log.info("%s: %d clips, %.3f h in %d shards", split, sp["clips"], sp["hours"], len(sp["shards"]))
    for source, per_split in manifest["drops"]["by_source"].items():
        for split, reasons in per_split.items():
            for reason, n in sorted(reasons.items()):
                log.info("dropped %d %s/%s clips: %s", n, source, split, reason)
