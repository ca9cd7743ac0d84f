"""Scores by part of the built-in corpora's held-out splits: does the model listen?

Parts come from the clip ids (speechlm.shard.corpus, .nonspeech): `seen` (new sentences of
training words), `unseen` (sentences holding words never heard), `random` (random orders of
training words) are scored by WER; `nonspeech` by the share of clips transcribed as empty.
Used by the demo on the test split and by the trainer on the eval split at every evaluation
(`training.eval_transcribe_clips`).
"""

from __future__ import annotations

from speechlm import wer
from speechlm.shard.synthetic import PARTS, half_of

LABELS = {
    "seen": "new sentences of training words",
    "unseen": "sentences holding words never heard in training",
    "random": "random orders of training words",
    "nonspeech": "silence, noise, tones and clicks",
}


def score_parts(rows: list[dict], split: str = "test") -> dict[str, dict]:
    """part -> {"clips", "wer" | "empty_share", ...} over rows with id, reference, hypothesis and,
    when transcribed with details, capped/loop flags (counted per part)."""
    out = {}
    for part in PARTS:
        sel = [r for r in rows if half_of(r["id"], split) == part]
        if not sel:
            continue
        res: dict = {
            "clips": len(sel),
            "capped": sum(bool(r.get("capped")) for r in sel),
            "loops": sum(bool(r.get("loop")) for r in sel),
        }
        if part == "nonspeech":
            res["empty_share"] = sum(not wer.normalize(r["hypothesis"]).strip() for r in sel) / len(sel)
        else:
            res.update(wer.score([r["reference"] for r in sel], [r["hypothesis"] for r in sel]))
        out[part] = res
    return out


def summary_lines(parts: dict[str, dict]) -> list[str]:
    lines = []
    for part, r in parts.items():
        what = f"on {r['clips']} clips of {LABELS[part]}"
        if part == "nonspeech":
            lines.append(f"held-out {part}: {100 * r['empty_share']:.1f}% transcribed as empty {what}")
        else:
            lines.append(f"held-out WER {part}: {100 * r['wer']:.1f}% {what}")
    return lines


def metrics(parts: dict[str, dict], prefix: str = "eval") -> dict[str, float]:
    """Flat metrics for metrics.jsonl: eval/wer/<part>, eval/empty_share/nonspeech."""
    out = {}
    for part, r in parts.items():
        if part == "nonspeech":
            out[f"{prefix}/empty_share/{part}"] = r["empty_share"]
        else:
            out[f"{prefix}/wer/{part}"] = r["wer"]
    return out
