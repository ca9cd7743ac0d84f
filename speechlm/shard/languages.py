"""A row's language and task labels, from its source's recipe keys and columns (issue 38).

Each clip of a source that states a language (`language`, or `language_column` per row) or a task
other than `transcribe` carries, in its JSON beside `text`: `language` (ISO 639-1), `task`, and for a
task answered from a column of its own, `target_text` (and `target_language` for a translation).
A source that states neither writes no such keys, so the sets built before keep their bytes: its clips
read as language unknown, task transcribe.
"""

from __future__ import annotations

from speechlm import tasks, text
from speechlm.shard import normalize as N

UNKNOWN_LANGUAGE = "unknown_language"  # a language column's value that names no ISO 639-1 language
EMPTY_TARGET = "empty_target"  # a row whose answer (translation, custom target) is empty


def language_code(value) -> str | None:
    """An ISO 639-1 code from a language column's cell ("es", "es-ES", "es_419", "ES" -> "es"); None
    when it names no language of speechlm.text.language_names."""
    if not isinstance(value, str) or not value.strip():
        return None
    code = value.strip().replace("_", "-").split("-")[0].lower()
    return code if code in text.language_names() else None


def stated(src) -> bool:
    """Whether the source's clips carry language and task labels."""
    return bool(src.language or src.language_column or src.task != text.TRANSCRIBE)


def row_labels(src, fields: dict, tags: str) -> tuple[dict, str | None]:
    """(the labels of a row, or {} when the source states none; the drop reason, or None)."""
    if not stated(src):
        return {}, None
    language = src.language
    if src.language_column:
        language = language_code(fields.get(src.language_column))
        if language is None:
            return {}, UNKNOWN_LANGUAGE
    labels = {"task": src.task}
    if language:
        labels["language"] = language
    if tasks.get(src.task).needs_target:
        target = N.normalize_text(str(fields.get(src.target_column) or ""), tags, src.target_language)
        if not target:
            return {}, EMPTY_TARGET
        labels["target_text"] = target
    if src.target_language:
        labels["target_language"] = src.target_language
    return labels, None
