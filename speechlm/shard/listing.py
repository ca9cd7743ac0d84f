"""The listing: the first pass of a build, done once per shard set: every unit's rows listed (text only),
filtered, normalized, de-duplicated, capped and truecased, then cut into work chunks.

The result is `.stage/plan.json`, which every build task reads, so all tasks of a build split
across machines see the same rows, the same truecaser and the same chunks. It is written under a
file lock: the first task to get there makes it, the others wait and read it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import random
import re
from pathlib import Path

from speechlm.fsutil import atomic_write
from speechlm.shard import languages, recasing, sources
from speechlm.shard import normalize as N
from speechlm.shard.schema import RowFilter, ShardRecipe

log = logging.getLogger("speechlm.shard")
UNSAFE = re.compile(r"[^A-Za-z0-9_-]")  # a dot would split the WebDataset key
PLAN = "plan.json"
FILTERED = "filtered"  # a row filter's exclude/include said no
OVER_CAP = "over_cap"  # beyond the source's max_clips for the split


def prepare(cfg: ShardRecipe, out: Path, stage: Path) -> dict:
    """The build's plan: read from the stage when a task already made it, else made and saved."""
    path = stage / PLAN
    with open(stage / "plan.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        if path.is_file():
            return json.loads(path.read_text())
        plan = make(cfg, out)
        # each unit's rows in a file of their own: a task loads only its units' rows
        (stage / "units").mkdir(exist_ok=True)
        for u in plan["units"]:
            atomic_write(unit_path(stage, u), json.dumps(u.pop("chunks"), ensure_ascii=False).encode())
        atomic_write(path, json.dumps(plan, ensure_ascii=False).encode())  # last: the plan is complete
        return plan


def unit_path(stage: Path, unit: dict) -> Path:
    return stage / "units" / f"{unit['name']}.json"


def load_chunks(stage: Path, unit: dict) -> list[dict]:
    return json.loads(unit_path(stage, unit).read_text())


def _units(src, split: str, listed: list[dict], kept: list[list]) -> list[dict]:
    """The build units of one source's split: each listed file with rows left after the checks."""
    return [
        {
            "name": f"{src.name}-{split}-{k:05d}",
            "source": src.name,
            "split": split,
            "label": u["label"],
            "file": u.get("file"),
            "groups": u.get("groups"),
            "rows": rows,
        }
        for k, (u, rows) in enumerate(zip(listed, kept))
        if rows
    ]


def _log_listed(src, split: str, key: str, n_rows: int, n_files: int, n_kept: int, per: dict) -> None:
    log.info("%s/%s: %d rows listed in %d file(s), %d kept for decoding", src.name, split, n_rows, n_files, n_kept)
    if per.get(N.DUPLICATE_ID):
        log.warning(
            "%s/%s: %d rows dropped as duplicate_id: their clip id is an earlier row's (ids come from %s); "
            "give every row its own id (%s.id_column), or see the drop report",
            src.name,
            split,
            per[N.DUPLICATE_ID],
            f"column '{src.id_column}'" if src.id_column else "the source's own names",
            key,
        )


def make(cfg: ShardRecipe, out: Path) -> dict:
    units, inputs, drops, dropped = [], {}, {}, []
    for i, src in enumerate(cfg.sources):
        key = f"sources[{i}]"
        stype = sources.of(src)
        stype.check(src, key)
        for split in stype.splits(src):
            listed = stype.list_units(src, split, key)
            inputs.setdefault(src.name, {})[split] = sum(len(u["rows"]) for u in listed)
            per = drops.setdefault(src.name, {}).setdefault(split, {})
            kept = _keep(cfg, src, listed, per, Report(dropped, src.name, split))
            _cap(cfg, src, split, kept, per)
            units += _units(src, split, listed, kept)
            _log_listed(src, split, key, inputs[src.name][split], len(listed), sum(map(len, kept)), per)
    tc_info, truecased = recasing.recase(cfg, units, out)
    for u in units:
        u["chunks"] = _chunks(u, cfg.output.work_chunk)
        u["rows"] = sum(len(c["rows"]) for c in u["chunks"])  # what the task split balances
        u["n_chunks"] = len(u["chunks"])
    return {
        "units": units,
        "inputs": inputs,
        "drops": drops,
        "dropped": dropped,
        "truecaser": tc_info,
        "truecased": truecased,
    }


def _count(per: dict, reason: str, n: int = 1) -> None:
    per[reason] = per.get(reason, 0) + n


def _matches(f: RowFilter, value) -> bool:
    values = set(f.include if f.include is not None else f.exclude)
    cells = value if isinstance(value, (list, tuple)) else [] if value is None else [value]
    hit = any(str(c) in values for c in cells)
    return hit if f.include is not None else not hit


class Report:
    """The rows a split drops, one line each (source, split, row, file, reason, detail): the drop
    report written beside the manifest (speechlm.shard.merge). Deliberate drops (filters, caps) are
    only counted."""

    def __init__(self, rows: list, source: str, split: str):
        self.rows, self.source, self.split = rows, source, split

    def add(self, where: str, ref, reason: str, detail: str = "") -> None:
        self.rows.append([self.source, self.split, where, ref_file(ref), reason, detail])


def ref_file(ref) -> str:
    """The file a row's audio ref names, when it is a path ("" for a dataset row index and the like)."""
    return ref if isinstance(ref, str) else ""


def _keep(cfg: ShardRecipe, src, listed: list[dict], per: dict, report: Report) -> list[list]:
    """Per unit, the rows that pass: [id, orig_id, normalized text, ref(, language and task labels)];
    the rest are counted and reported."""
    seen, kept = {}, []
    for u in listed:
        rows = []
        for oid, text, ref, fields, *at in u["rows"]:
            where = at[0] if at else str(oid)  # a type may say where the row is (file:line)
            cid = f"{src.name}_{UNSAFE.sub('_', str(oid))}"
            if text is None:  # a label whose bytes are not UTF-8
                _count(per, N.NOT_UTF8)
                report.add(where, ref, N.NOT_UTF8)
                continue
            if not all(_matches(f, fields.get(f.column)) for f in src.filters):
                _count(per, FILTERED)
                continue
            labels, bad = languages.row_labels(src, fields, cfg.normalize.tags)
            if bad:
                _count(per, bad)
                report.add(where, ref, bad, str(fields.get(src.language_column or src.target_column, ""))[:80])
                continue
            text = N.normalize_text(text, cfg.normalize.tags, labels.get("language"))
            if not text and not src.keep_empty:
                _count(per, N.EMPTY_TEXT)
                report.add(where, ref, N.EMPTY_TEXT)
            elif cid in seen:
                _count(per, N.DUPLICATE_ID)
                report.add(where, ref, N.DUPLICATE_ID, f"clip id {cid} is also {seen[cid]}'s")
            else:
                seen[cid] = where
                rows.append([cid, str(oid), text, ref] + ([labels] if labels else []))
        kept.append(rows)
    return kept


def _cap(cfg: ShardRecipe, src, split: str, kept: list[list], per: dict) -> None:
    """A seeded random choice of max_clips rows over the whole split, the order kept."""
    cap = src.max_clips.get(split)
    total = sum(map(len, kept))
    if not cap or total <= cap:
        return
    chosen = set(random.Random(f"{cfg.output.seed}-{src.name}-{split}-cap").sample(range(total), cap))
    pos = 0
    for rows in kept:
        keep = [r for j, r in enumerate(rows, pos) if j in chosen]
        pos += len(rows)
        rows[:] = keep
    _count(per, OVER_CAP, total - cap)


def _chunks(unit: dict, size: int) -> list[dict]:
    """Work chunks of about `size` rows. A streamed file is cut at row-group boundaries, so each
    chunk reads whole row groups once; other units are cut every `size` kept rows."""
    rows = unit["rows"]
    if unit["groups"] is None:
        return [{"rows": rows[k : k + size], "groups": None, "first": 0} for k in range(0, len(rows), size)]
    chunks, start, groups, j = [], 0, [], 0
    for g in range(len(unit["groups"])):
        groups.append(g)
        end = start + sum(unit["groups"][x] for x in groups)
        if end - start >= size or g == len(unit["groups"]) - 1:
            mine = []
            while j < len(rows) and rows[j][3] < end:
                mine.append(rows[j])
                j += 1
            if mine:
                chunks.append({"rows": mine, "groups": groups, "first": start})
            start, groups = end, []
    return chunks


def assign(units: list[dict], num_tasks: int) -> list[list[int]]:
    """Unit indices per task: the largest units first, each to the least-loaded task (ties: lowest)."""
    loads, tasks = [0] * num_tasks, [[] for _ in range(num_tasks)]
    for i in sorted(range(len(units)), key=lambda i: (-units[i]["rows"], i)):
        t = min(range(num_tasks), key=lambda t: (loads[t], t))
        tasks[t].append(i)
        loads[t] += units[i]["rows"]
    return [sorted(t) for t in tasks]
