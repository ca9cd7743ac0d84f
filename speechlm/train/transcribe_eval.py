"""Transcription at every evaluation: WER per part of the eval split, beside the eval loss; where the
eval clips state their language and task (issue 38), the scores per language and task too
(speechlm.scoring.languages: `eval/wer/es`, `eval/cer/ja`, `eval/chrf/es-en`, `eval/lid`, ...). A set
whose clips state none logs exactly the keys it logged before.

Every rank transcribes the same clips, so that under ZeRO-3 all ranks run the same modules
(pitfall 2); rank 0 logs. Costs one generate pass over `training.eval_transcribe_clips` clips per
eval set.
"""

from __future__ import annotations

from speechlm import inference
from speechlm.scoring import by_part, languages, wer


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
    if any("task" in r for r in rows):
        by_language = languages.score_rows(languages.mark_answer_languages(rows))
        scores.update({f"eval/{k}": v for k, v in by_language.items() if not k.startswith("clips/")})
        clips.update({f"eval/{k}": v for k, v in by_language.items() if k.startswith("clips/")})
    scores.update({"eval/capped": capped, "eval/loops_truncated": loops})
    line = ", ".join(f"{k.removeprefix('eval/')} {v:.3f}" for k, v in scores.items())
    return {**scores, **clips}, line  # the clips each figure was measured on: the model card states them
