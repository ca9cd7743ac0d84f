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
from speechlm.shard.listing import PLAN
from speechlm.shard.manifest import build_manifest
from speechlm.shard.schema import build_recipe, fingerprint

log = logging.getLogger("speechlm.shard")
STAGE = ".stage"
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
                {"file": file, "source": name, "split": split, "ids": sh["ids"], "durations": sh["durations"]}
            )
    for part, final in moves:
        if part.is_file():
            os.replace(part, final)
        elif not final.is_file():
            raise ConfigError(
                f"merge: {part} is missing; delete {stage / 'done'} entries of its file and rerun its task"
            )
    manifest = build_manifest(cfg, fp, entries, plan["inputs"], drops, plan["truecaser"], plan["truecased"])
    atomic_write(out / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True).encode())
    shutil.rmtree(stage)
    _log_summary(manifest)
    return out


def _log_summary(manifest: dict) -> None:
    for split, sp in manifest["splits"].items():
        log.info("%s: %d clips, %.3f h in %d shards", split, sp["clips"], sp["hours"], len(sp["shards"]))
    for source, per_split in manifest["drops"]["by_source"].items():
        for split, reasons in per_split.items():
            for reason, n in sorted(reasons.items()):
                log.info("dropped %d %s/%s clips: %s", n, source, split, reason)
