"""Transcription at every evaluation: WER per part of the eval split, beside the eval loss.

Every rank transcribes the same clips, so that under ZeRO-3 all ranks run the same modules
(pitfall 2); rank 0 logs. Costs one generate pass over `training.eval_transcribe_clips` clips per
eval set.
"""

from __future__ import annotations

from speechlm import inference
from speechlm.scoring import by_part, wer


def transcribe_eval(model, cfg) -> tuple[dict[str, float], str]:
    """(metrics, one summary line) for the eval sets of cfg.data.eval."""
    rows, capped, loops = [], 0, 0
    split = "eval"
    for ds in cfg.data.eval:
        split = ds.split
        res = inference.evaluate(
            model, ds.path, cfg.training.eval_transcribe_clips, cfg.training.per_device_eval_batch_size, ds.split
        )
        rows += res["rows"]
        capped += res["capped"]
        loops += res["loops_truncated"]
    parts = by_part.score(rows, split)
    scores = by_part.metrics(parts)
    clips = {f"eval/clips/{part}": r["clips"] for part, r in parts.items()}
    if not parts:  # no clip's id names a part: one WER over everything
        scores["eval/wer"] = wer.score([r["reference"] for r in rows], [r["hypothesis"] for r in rows])["wer"]
        clips = {"eval/clips": len(rows)}
    scores.update({"eval/capped": capped, "eval/loops_truncated": loops})
    line = ", ".join(f"{k.removeprefix('eval/')} {v:.3f}" for k, v in scores.items())
    return {**scores, **clips}, line  # the clips each figure was measured on: the model card states them
