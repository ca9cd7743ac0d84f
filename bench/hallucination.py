#!/usr/bin/env python
"""The hallucination signal: how well the CTC head's word confidence separates right words from wrong
ones, on clean speech, speech under noise and non-speech, and what dropping unsupported words does
to WER.

    python bench/hallucination.py -m outputs/demo/final [--data shards/demo] [--thresholds 0.1 0.2 0.3 0.5]

Each generated word is aligned to the reference (jiwer): correct, or wrong (a substitution or an
insertion); every word said for a non-speech clip (empty reference) is wrong. For each threshold:
the share of wrong words flagged (confidence below it), the share of correct words flagged, and the
WER with flagged words dropped (`speechlm eval --word-threshold T --drop-unsupported`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def word_labels(ref: str, words: list[dict]) -> list[bool]:
    """Per generated word, whether it is right (aligned to an equal reference word)."""
    import jiwer

    from speechlm.scoring.boundaries import normalize_word

    hyp = [normalize_word(w["text"]) for w in words]
    ref_words = [normalize_word(w) for w in ref.split()]
    if not hyp:
        return []
    if not ref_words:
        return [False] * len(hyp)
    out = [False] * len(hyp)
    for chunk in jiwer.process_words(" ".join(ref_words), " ".join(hyp)).alignments[0]:
        if chunk.type == "equal":
            for k in range(chunk.hyp_start_idx, chunk.hyp_end_idx):
                out[k] = True
    return out


def condition_rows(name: str, rows: list[dict], thresholds: list[float]) -> list[dict]:
    from speechlm.scoring import wer

    labels = [(w["confidence"], ok) for r in rows for w, ok in zip(r["words"], word_labels(r["reference"], r["words"]))]
    wrong = [c for c, ok in labels if not ok]
    right = [c for c, ok in labels if ok]
    refs = [r["reference"] for r in rows]
    out = []
    for t in thresholds:
        kept = [" ".join(w["text"] for w in r["words"] if w["confidence"] >= t) for r in rows]
        out.append(
            {
                "condition": name,
                "threshold": t,
                "wrong_words": len(wrong),
                "wrong_flagged": sum(c < t for c in wrong) / max(1, len(wrong)),
                "right_words": len(right),
                "right_flagged": sum(c < t for c in right) / max(1, len(right)),
                "wer": wer.score(refs, [r["hypothesis"] for r in rows])["wer"],
                "wer_dropped": wer.score(refs, kept)["wer"],
            }
        )
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--data", default="shards/demo")
    ap.add_argument("--split", default="test")
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.3, 0.5])
    ap.add_argument("--noise-snr-db", type=float, default=5.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from speechlm.inference import condition, evaluate, load_model

    model = load_model(args.model)
    rows = []
    for name, snr in (("clean", None), (f"noise {args.noise_snr_db:g} dB", args.noise_snr_db)):
        suffix, corrupt = condition(snr)
        res = evaluate(model, args.data, split=args.split, corrupt=corrupt, suffix=suffix, word_threshold=0.0)
        speech = [r for r in res["rows"] if r["reference"].strip()]
        silent = [r for r in res["rows"] if not r["reference"].strip()]
        rows += condition_rows(name, speech, args.thresholds)
        if name == "clean":
            rows += condition_rows("non-speech", silent, args.thresholds)
    for r in rows:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
