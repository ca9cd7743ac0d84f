"""The demo's words for the parts of its corpora's held-out splits: does the model listen?

The parts are named in the clip ids (speechlm.demo.corpus, .nonspeech) and scored by the core
(speechlm.scoring.by_part): `seen` (new sentences of training words), `unseen` (sentences holding words never
heard), `random` (random orders of training words) by WER; `nonspeech` by the share of clips
transcribed as empty. This module gives them their labels in the lines the demo prints.
"""

from __future__ import annotations

# in the order the demo prints them
LABELS = {
    "seen": "new sentences of training words",
    "unseen": "sentences holding words never heard in training",
    "random": "random orders of training words",
    "nonspeech": "silence, noise, tones and clicks",
}


def summary_lines(parts: dict[str, dict]) -> list[str]:
    """One line per part of speechlm.scoring.by_part.score's result: its WER, or the share said empty."""
    order = [p for p in LABELS if p in parts] + sorted(p for p in parts if p not in LABELS)
    lines = []
    for part in order:
        r = parts[part]
        what = f"on {r['clips']} clips of {LABELS.get(part, f'part {part}')}"
        if "empty_share" in r:
            lines.append(f"held-out {part}: {100 * r['empty_share']:.1f}% transcribed as empty {what}")
        else:
            lines.append(f"held-out WER {part}: {100 * r['wer']:.1f}% {what}")
    return lines
