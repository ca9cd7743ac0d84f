"""The model card's scores per language and task (issue 38): rows of the card's table and entries of its
`model-index` (one per language and task, as the Hub reads them), and its `language:` list.

The scores are speechlm.scoring.languages' keys, from `speechlm eval` results ("languages") or the run's
in-training eval (`eval/` + the same keys): `wer/es`, `cer/ja`, `bleu/es-en` and `chrf/es-en` (a
translation from es into en), `bleu/<task>/<lang>` (a task of one's own), `lid` and `lid/es`, and
`clips/<task>/<name>` for the clips each was measured on.
"""

from __future__ import annotations

from speechlm import text

# metric -> (its name on the card, whether a fraction shown as %: BLEU and chrF are 0-100 already)
LANGUAGE_METRICS = {"wer": ("WER", True), "cer": ("CER", True), "bleu": ("BLEU", False), "chrf": ("chrF", False)}
LANGUAGE_METRICS["lid"] = ("language ID accuracy", True)
# a row's task -> the Hub's task type and name
TASK_TYPES = {
    "transcribe": ("automatic-speech-recognition", "Automatic Speech Recognition"),
    "translate": ("translation", "Speech Translation"),
    "lid": ("audio-classification", "Spoken Language Identification"),
}


def _parsed(key: str) -> tuple[str, str, str | None] | None:
    """(metric, task, language or a translation's `src-tgt`) of a score key, None for a key that is not
    a score per language (a part's `wer/seen`, `clips/...`, `other_language/...`)."""
    metric, _, name = key.partition("/")
    if metric not in LANGUAGE_METRICS:
        return None
    if metric in ("wer", "cer"):
        return (metric, "transcribe", name) if name in text.language_names() else None
    if metric == "lid":
        return metric, "lid", name or None
    if "/" in name:  # a task of one's own: bleu/<task>/<lang>
        task, lang = name.split("/", 1)
        return metric, task, lang
    return metric, "translate", name


def is_language_key(key: str, prefix: str = "") -> bool:
    """Whether `key` (after `prefix`) is a score per language (not a part's WER)."""
    return key.startswith(prefix) and _parsed(key.removeprefix(prefix)) is not None


def language_rows(scores: dict, dataset: str, prefix: str = "") -> list[dict]:
    """{"dataset", "language", "task", "metric", "value" (% or 0-100), "clips"} per score per language."""
    rows = []
    for key, value in sorted(scores.items()):
        if not key.startswith(prefix) or (parsed := _parsed(key.removeprefix(prefix))) is None:
            continue
        metric, task, lang = parsed
        clips = scores.get(f"{prefix}clips/{task}/{lang}")
        value = 100 * value if LANGUAGE_METRICS[metric][1] else value
        rows.append(
            {
                "dataset": dataset,
                "language": lang,
                "task": task,
                "metric": metric,
                "value": value,
                "clips": None if clips is None else int(clips),
            }
        )
    return rows


def languages(configured: list[str], rows: list[dict]) -> list[str]:
    """The card's `language:` list: the model's languages and those its scores name (a translation's
    source and target), English when none is named."""
    found = set(configured)
    for r in rows:
        found.update(x for x in (r.get("language") or "").split("-") if x in text.language_names())
    return sorted(found) or ["en"]


def index_entry(r: dict) -> list[str]:
    """One model-index result of a row per language and task."""
    kind, name = TASK_TYPES.get(r["task"], ("automatic-speech-recognition", r["task"]))
    lang = r["language"] or "all"
    clips = f", {r['clips']} clips" if r["clips"] is not None else ""
    return [
        "  - task:",
        f"      type: {kind}",
        f"      name: {name}",
        "    dataset:",
        f"      name: {r['dataset']} ({lang})",
        f"      type: {r['dataset'].split(' ')[0]}",
        f"      config: {lang}",
        "      args:",
        f"        language: {lang}",
        "    metrics:",
        f"    - type: {'accuracy' if r['metric'] == 'lid' else r['metric']}",
        f"      value: {r['value']:.2f}",
        f"      name: {LANGUAGE_METRICS[r['metric']][0]} ({lang}{clips})",
    ]


def table(rows: list[dict]) -> list[str]:
    """The card's table of scores per language and task."""
    if not rows:
        return []
    lines = ["", "Per language and task (WER, CER and language ID in %, BLEU and chrF 0-100):", ""]
    lines += ["| dataset | language | task | metric | value | clips |", "|---|---|---|---|---|---|"]
    for r in rows:
        clips = r["clips"] if r["clips"] is not None else ""
        lang = r["language"] or "all"
        name = LANGUAGE_METRICS[r["metric"]][0]
        lines.append(f"| {r['dataset']} | {lang} | {r['task']} | {name} | {r['value']:.2f} | {clips} |")
    return lines
