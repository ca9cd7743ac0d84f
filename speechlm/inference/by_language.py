"""A test set's languages and tasks at evaluation (issue 38, docs/languages.md): each clip is asked what
its labels say (its task; its language pinned when the model serves languages), the reference is the
task's answer (a translation's target text), and a model that opens its answers with the language is
asked once more with no language given, for language ID.

Clips that carry no labels are asked exactly as before languages existed (one `Task()` for all), so an
English-only set's rows, hypotheses and scores do not change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from speechlm.inference.transcribe import Task, clip_spans, long_form_for

# new tokens the language-ID pass lets a clip write: "[es] " is 3-5 tokens in a byte-level BPE, and
# SpeechLM._language_opened reads the opening off the first 8
DETECT_TOKENS = 8


def multilingual(model) -> bool:
    """Whether the model lists its languages (`model.languages`); one that does not was trained on
    prompts that state none, so a clip's language is not stated to it (as the server does)."""
    return bool(getattr(model.cfg, "languages", None))


def served(model) -> list[str]:
    """The languages the model serves: its `languages`; a model that lists none, English."""
    return list(getattr(model.cfg, "languages", None) or ["en"])


def fitted(model, task: Task) -> Task:
    """`task` as the server asks it of this model: a language it serves, as its ISO 639-1 code (ValueError
    naming the ones it serves otherwise), and none for a model that lists none (English only, trained on
    prompts that state no language: a stated one is a prompt it never saw)."""
    if task.language is None:
        return task
    from speechlm import text  # transformers' language table: only when a language is given

    code = text.language_code(task.language, served(model))
    return replace(task, language=code if multilingual(model) else None)


def asked(model, labels: dict | None) -> Task:
    """What a clip with these labels (speechlm.shard.languages: language, task, ...) is asked."""
    if not labels:
        return Task()
    language = labels.get("language") if multilingual(model) else None
    return Task(language, labels.get("task") or "transcribe")


def reference(labels: dict | None, transcript: str) -> str:
    """The answer a clip is scored against: its transcript, or its task's target text."""
    if not labels or (labels.get("task") or "transcribe") == "transcribe":
        return transcript
    return labels.get("target_text") or ""


def row_labels(labels: dict | None, task: Task) -> dict:
    """The keys a scored row carries for speechlm.scoring.languages (none for an unlabelled clip)."""
    if not labels:
        return {}
    out = {"language": labels.get("language"), "task": labels.get("task") or "transcribe"}
    if labels.get("target_language"):
        out["target_language"] = labels["target_language"]
    if task.language:
        out["pinned"] = task.language
    return out


def run_by_task(run: Callable[[list, Task], list], waves: list[np.ndarray], tasks: list[Task]) -> list:
    """`run(waves, task)` once per distinct task over its clips, the outputs back in the clips' order."""
    out: list = [None] * len(waves)
    for task in dict.fromkeys(tasks):
        idx = [i for i, t in enumerate(tasks) if t == task]
        for i, o in zip(idx, run([waves[i] for i in idx], task)):
            out[i] = o
    return out


def detect_languages(model, waves: list[np.ndarray], batch_size: int, long_form) -> list[str | None]:
    """The language the model names for each clip given none: its answer's opening over the clip's first
    window (the window `transcribe` would open with), DETECT_TOKENS new tokens at most; None per clip
    for a model that does not open its answers with the language."""
    if not getattr(model.cfg, "answer_language", False) or not waves:
        return [None] * len(waves)
    lf = long_form_for(model, long_form)
    firsts = []
    for w in waves:
        spans = clip_spans(model, w, lf)
        firsts.append(w[spans[0][0] : spans[0][1]] if spans else w)
    order = sorted(range(len(firsts)), key=lambda i: len(firsts[i]))
    out: list = [None] * len(waves)
    for k in range(0, len(order), batch_size):
        idx = order[k : k + batch_size]
        answers = model.transcribe([firsts[i] for i in idx], max_new_tokens=DETECT_TOKENS, details=True)
        for i, a in zip(idx, answers):
            out[i] = a.get("language")
    return out
