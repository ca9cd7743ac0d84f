"""Scores by part of a held-out split: what a model gets right on each kind of clip.

A clip's part is named in its id, a convention any source may use: a clip whose id holds
`<split>-<part>-` right after the start or an underscore belongs to part `<part>` of that split
(the orig id `test-random-00007` of source `speech` gives the clip id `speech_test-random-00007`,
part `random` of the test split). A part name starts with a letter and holds letters and digits
only, so `test-00012` names no part. Clips whose ids name no part are not scored by part.

A part whose references are all empty (non-speech: silence, noise) is scored by the share of its
clips transcribed as empty; every other part by corpus WER (speechlm.scoring.wer.score). Metrics for
metrics.jsonl: `eval/wer/<part>` and `eval/empty_share/<part>`. The trainer scores the eval split
this way at every evaluation (`training.eval_transcribe_clips`); the demo, the test split.
"""

from __future__ import annotations

import re

from speechlm.scoring import wer


def part_of(clip_id: str, split: str = "test") -> str | None:
    """The part of a clip of `split`, from its id; None when the id names none."""
    m = re.search(rf"(?:^|_){re.escape(split)}-([A-Za-z][A-Za-z0-9]*)-", clip_id)
    return m.group(1) if m else None


def _empty(text: str) -> bool:
    return not wer.normalize(text).strip()


def score(rows: list[dict], split: str = "test") -> dict[str, dict]:
    """part -> {"clips", "capped", "loops", and "empty_share" or wer.score's keys ("wer", ...)}, parts
    in name order, over rows with id, reference, hypothesis and, when transcribed with details,
    capped/loop flags (counted per part)."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        part = part_of(r["id"], split)
        if part is not None:
            by.setdefault(part, []).append(r)
    out = {}
    for part, sel in sorted(by.items()):
        res: dict = {
            "clips": len(sel),
            "capped": sum(bool(r.get("capped")) for r in sel),
            "loops": sum(bool(r.get("loop")) for r in sel),
        }
        if all(_empty(r["reference"]) for r in sel):
            res["empty_share"] = sum(_empty(r["hypothesis"]) for r in sel) / len(sel)
        else:
            res.update(wer.score([r["reference"] for r in sel], [r["hypothesis"] for r in sel]))
        out[part] = res
    return out


def metrics(parts: dict[str, dict], prefix: str = "eval") -> dict[str, float]:
    """Flat metrics for metrics.jsonl: <prefix>/wer/<part>, <prefix>/empty_share/<part>."""
    out = {}
    for part, r in parts.items():
        if "empty_share" in r:
            out[f"{prefix}/empty_share/{part}"] = r["empty_share"]
        else:
            out[f"{prefix}/wer/{part}"] = r["wer"]
    return out
