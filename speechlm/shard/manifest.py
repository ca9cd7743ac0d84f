"""manifest.json: what the reader plans from (per-shard ids and durations) and what the build did."""

from __future__ import annotations

import dataclasses

from speechlm.shard import normalize
from speechlm.shard.schema import SPLITS, ShardRecipe, recipe_dict

FORMAT = "speechlm-shards/1"
HIST_EDGES = [float(x) for x in range(0, 21)] + [float("inf")]


def _hours(seconds: float) -> float:
    return round(seconds / 3600, 6)


def _histogram(durations: list[float]) -> list[int]:
    counts = [0] * (len(HIST_EDGES) - 1)
    for d in durations:
        i = min(int(d), len(counts) - 1)
        counts[i] += 1
    return counts


COUNTED_BY = ("languages", "tasks")  # what a split's clips and hours are also counted by, when its clips state them
UNKNOWN_LANGUAGE_KEY = "unknown"  # the key of clips whose source states no language


def _count_labels(sp: dict, sh: dict) -> None:
    """Add a shard's clips and seconds to its split's counts per language and per task."""
    if "languages" not in sh:
        return
    for lang, task, d in zip(sh["languages"], sh["tasks"], sh["durations"]):
        for key, value in (("languages", lang or UNKNOWN_LANGUAGE_KEY), ("tasks", task)):
            per = sp.setdefault(key, {}).setdefault(value, {"clips": 0, "seconds": 0.0})
            per["clips"] += 1
            per["seconds"] += d


def _split_totals(recipe: ShardRecipe, shards: list[dict]) -> dict:
    """split -> its shards (in write order) with clips, seconds and hours, in all, per source and, where
    clips state them, per language and per task; splits in SPLITS order."""
    weights = {s.name: s.weight for s in recipe.sources}
    splits: dict = {}
    for sh in shards:
        sp = splits.setdefault(sh["split"], {"shards": [], "clips": 0, "seconds": 0.0, "sources": {}})
        seconds = round(sum(sh["durations"]), 6)
        sp["shards"].append(
            {
                "file": sh["file"],
                "source": sh["source"],
                "weight": weights[sh["source"]],
                "clips": len(sh["ids"]),
                "seconds": seconds,
                "ids": sh["ids"],
                "durations": sh["durations"],
                **{k: sh[k] for k in ("languages", "tasks") if k in sh},
            }
        )
        _count_labels(sp, sh)
        sp["clips"] += len(sh["ids"])
        sp["seconds"] += seconds
        per = sp["sources"].setdefault(sh["source"], {"clips": 0, "seconds": 0.0})
        per["clips"] += len(sh["ids"])
        per["seconds"] += seconds
    for sp in splits.values():
        sp["seconds"] = round(sp["seconds"], 6)
        sp["hours"] = _hours(sp["seconds"])
        for per in [*sp["sources"].values(), *(v for k in COUNTED_BY for v in sp.get(k, {}).values())]:
            per["seconds"] = round(per["seconds"], 6)
            per["hours"] = _hours(per["seconds"])
    return {k: splits[k] for k in SPLITS if k in splits}


def _drop_summary(drops: dict) -> dict:
    """The dropped rows in all, by reason (sorted) and as given (source -> split -> reason -> count)."""
    by_reason: dict[str, int] = {}
    for per_split in drops.values():
        for reasons in per_split.values():
            for r, n in reasons.items():
                by_reason[r] = by_reason.get(r, 0) + n
    return {"total": sum(by_reason.values()), "by_reason": dict(sorted(by_reason.items())), "by_source": drops}


def _source_summary(
    recipe: ShardRecipe, splits: dict, inputs: dict, drops: dict, truecaser: dict | None, truecased: list[str]
) -> dict:
    """source -> its kind, weight, re-casing, and rows read, kept and dropped per split."""
    sources = {}
    for s in recipe.sources:
        kept = {sp: v["sources"].get(s.name, {}).get("clips", 0) for sp, v in splits.items()}
        sources[s.name] = {
            "kind": s.kind,
            "weight": s.weight,
            "truecased": s.name in truecased,
            # which model re-cased this source's labels, if any (one per language: speechlm.shard.recasing)
            "truecaser": _source_truecaser(truecaser, s.name) if s.name in truecased else None,
            "keep_empty": s.keep_empty,  # its empty labels are deliberate (non-speech examples)
            "input": inputs.get(s.name, {}),
            "kept": {sp: n for sp, n in kept.items() if sp in inputs.get(s.name, {})},
            "dropped": {sp: sum(r.values()) for sp, r in drops.get(s.name, {}).items()},
        }
    return sources


def _source_truecaser(truecaser: dict | None, name: str) -> dict | list | None:
    """{"model", "sha256"} of the model that re-cased source `name`; with a model per language, a list of
    them with their "language"."""
    if not truecaser:
        return None
    if "by_language" not in truecaser:
        return {"model": truecaser["model"], "sha256": truecaser["sha256"]}
    return [
        {"language": lang, "model": i["model"], "sha256": i["sha256"]}
        for lang, i in truecaser["by_language"].items()
        if name in i["applied_to"]
    ]


def _duration_histogram(splits: dict) -> dict:
    """Clip counts per one-second bin (the last one open-ended), per split."""
    all_durs = {sp: [d for sh in v["shards"] for d in sh["durations"]] for sp, v in splits.items()}
    return {
        "bin_edges": [e if e != float("inf") else None for e in HIST_EDGES],  # None: no upper bound
        "counts": {sp: _histogram(d) for sp, d in all_durs.items()},
    }


def build_manifest(
    recipe: ShardRecipe,
    fingerprint: str,
    shards: list[dict],
    inputs: dict,
    drops: dict,
    truecaser: dict | None,
    truecased: list[str],
    input_digests: dict | None = None,
) -> dict:
    """`shards`: {file, source, split, ids, durations} in write order; `inputs`: source -> split -> rows;
    `drops`: source -> split -> reason -> count; `input_digests`: source -> {input: digest} (what the
    build read besides the recipe, SourceType.inputs: a set built from other inputs is rebuilt)."""
    splits = _split_totals(recipe, shards)
    return {
        "format": FORMAT,
        "name": recipe.name,
        "fingerprint": fingerprint,
        "inputs": input_digests or {},
        "splits": splits,
        "sources": _source_summary(recipe, splits, inputs, drops, truecaser, truecased),
        "drops": _drop_summary(drops),
        "duration_histogram": _duration_histogram(splits),
        "normalization": {**dataclasses.asdict(recipe.normalize), "rule": normalize.__doc__.strip()},
        "truecaser": truecaser,
        "recipe": recipe_dict(recipe),
    }
