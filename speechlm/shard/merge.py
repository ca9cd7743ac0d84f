"""merge(DIR): every task's part tars renamed to their final names, and the one manifest.json.

Part tars are named for their source file (`.stage/parts/<unit>-NNNNN.tar`); the final name
`<source>-<split>-NNNNNN.tar` numbers them in the plan's unit order, so the set does not depend
on how many tasks built it or in what order they finished. A rename, not a copy: merging costs no
disk, and a killed merge run again picks up where it stopped.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

from speechlm.config import ConfigError
from speechlm.fsutil import atomic_write
from speechlm.shard.listing import FILTERED, OVER_CAP, PLAN
from speechlm.shard.manifest import build_manifest
from speechlm.shard.schema import build_recipe, fingerprint

log = logging.getLogger("speechlm.shard")
STAGE = ".stage"
INPUTS = "inputs.json"  # the stage's record of the inputs' digests (SourceType.inputs)
DROP_REPORT = "drops.tsv"
REPORT_COLUMNS = ("source", "split", "row", "file", "reason", "detail")
DELIBERATE = (FILTERED, OVER_CAP)  # the recipe asked for these: counted, never reported or held against a build
TAR_NAME = re.compile(r"^[A-Za-z0-9_]+-(train|eval|test)-\d{6}\.tar$")


def merge(out: str | Path) -> Path:
    out = Path(out)
    stage = out / STAGE
    if not (stage / PLAN).is_file():
        if (out / "manifest.json").is_file():
            log.info("%s is already merged", out)
            return out
        raise ConfigError(f"merge: {out} holds no build to merge (no {STAGE}/{PLAN}); run the build tasks first")
    cfg = build_recipe(json.loads((stage / "recipe.json").read_text()))
    fp = (stage / "fingerprint").read_text()
    if fingerprint(cfg) != fp:
        raise ConfigError(f"merge: {stage / 'recipe.json'} does not match the build's fingerprint")
    plan = json.loads((stage / PLAN).read_text())
    done = _finished_units(stage, plan)
    drops, entries, moves = _gathered(stage, out, plan, done)
    kept: dict = {}
    for e in entries:
        kept[(e["source"], e["split"])] = kept.get((e["source"], e["split"]), 0) + len(e["ids"])
    dropped = plan.get("dropped", []) + [row for u in plan["units"] for row in done[u["name"]].get("dropped", [])]
    report = write_drop_report(out, dropped)
    check_losses(cfg, out, plan["inputs"], drops, kept, dropped, report)
    for part, final in moves:
        if part.is_file():
            os.replace(part, final)
        elif not final.is_file():
            raise ConfigError(
                f"merge: {part} is missing; delete {stage / 'done'} entries of its file and rerun its task"
            )
    staged_inputs = stage / INPUTS
    digests = json.loads(staged_inputs.read_text()) if staged_inputs.is_file() else {}
    manifest = build_manifest(
        cfg, fp, entries, plan["inputs"], drops, plan["truecaser"], plan["truecased"], input_digests=digests
    )
    atomic_write(out / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True).encode())
    shutil.rmtree(stage)
    _log_summary(manifest, report)
    return out


def _finished_units(stage: Path, plan: dict) -> dict:
    """Unit name -> what its task recorded when done; ConfigError while any unit is not built yet."""
    done = {}
    for u in plan["units"]:
        f = stage / "done" / f"{u['name']}.json"
        if f.is_file():
            done[u["name"]] = json.loads(f.read_text())
    missing = [u for u in plan["units"] if u["name"] not in done]
    if missing:
        raise ConfigError(
            f"merge: {len(missing)} of {len(plan['units'])} source files are not built yet "
            f"(first: {missing[0]['source']} {missing[0]['label']}); run every task "
            "(--task-index 0 to N-1) to the end first"
        )
    return done


def _gathered(stage: Path, out: Path, plan: dict, done: dict) -> tuple[dict, list, list]:
    """(drops per source and split, the manifest's shard entries, (part, final file) moves), numbering
    each source's and split's shards in the plan's unit order."""
    drops, entries, moves, counters = plan["drops"], [], [], {}
    for u in plan["units"]:
        name, split, d = u["source"], u["split"], done[u["name"]]
        per = drops.setdefault(name, {}).setdefault(split, {})
        for reason, n in d["drops"].items():
            per[reason] = per.get(reason, 0) + n
        for sh in d["shards"]:
            k = counters[(name, split)] = counters.get((name, split), -1) + 1
            file = f"{name}-{split}-{k:06d}.tar"
            moves.append((stage / "parts" / sh["part"], out / file))
            entries.append(
                {
                    "file": file,
                    "source": name,
                    "split": split,
                    "ids": sh["ids"],
                    "durations": sh["durations"],
                    **{k: sh[k] for k in ("languages", "tasks") if k in sh},
                }
            )
    return drops, entries, moves


def _log_summary(manifest: dict, report: Path | None) -> None:
    for split, sp in manifest["splits"].items():
        log.info("%s: %d clips, %.3f h in %d shards", split, sp["clips"], sp["hours"], len(sp["shards"]))
    for source, per_split in manifest["drops"]["by_source"].items():
        for split, reasons in per_split.items():
            for reason, n in sorted(reasons.items()):
                level = logging.INFO if reason in DELIBERATE else logging.WARNING
                log.log(level, "dropped %d %s/%s clips: %s", n, source, split, reason)
    if report is not None:
        log.warning("every dropped row, with its reason: %s", report)


def write_drop_report(out: Path, rows: list[list]) -> Path | None:
    """`drops.tsv` beside the manifest: one line per dropped row (source, split, row, file, reason,
    detail); None, and no file, when nothing was dropped (deliberate drops are only counted)."""
    path = out / DROP_REPORT
    if not rows:
        path.unlink(missing_ok=True)
        return None
    clean = lambda v: " ".join(str(v).split())  # noqa: E731 - one field per tab, one row per line
    lines = ["\t".join(REPORT_COLUMNS)] + ["\t".join(map(clean, r)) for r in rows]
    atomic_write(path, ("\n".join(lines) + "\n").encode())
    return path


def check_losses(cfg, out: Path, listed: dict, drops: dict, kept: dict, dropped: list, report: Path | None) -> None:
    """A split left with no clips, or a source's split that dropped more than normalize.max_drop_share
    of its rows (filters and caps aside), stops the build before the manifest is written."""
    share, problems = cfg.normalize.max_drop_share, []
    splits = sorted({sp for per in listed.values() for sp in per})
    for sp in splits:
        if not sum(n for (_, s), n in kept.items() if s == sp):
            problems.append(f"split '{sp}' ends with 0 clips")
    for source, per in listed.items():
        for sp in per:
            bad = {r: n for r, n in drops.get(source, {}).get(sp, {}).items() if r not in DELIBERATE and n}
            lost, have = sum(bad.values()), kept.get((source, sp), 0)
            if lost and lost > share * (lost + have):
                why = ", ".join(f"{r} {n}" for r, n in sorted(bad.items()))
                problems.append(
                    f"{source}/{sp}: {lost} of {lost + have} rows dropped ({why}), more than "
                    f"normalize.max_drop_share={share:g}"
                )
    if not problems:
        return
    first = "; ".join(f"{r[2]}{' ' + r[3] if r[3] else ''} ({r[4]})" for r in dropped[:3])
    raise ConfigError(
        f"{out}: no manifest written: "
        + "; ".join(problems)
        + (f". First dropped rows: {first}" if first else "")
        + (f". Every dropped row, with its reason: {report}" if report else "")
        + " (fix the data and run the same command again; normalize.max_drop_share=1 accepts any share)"
    )
