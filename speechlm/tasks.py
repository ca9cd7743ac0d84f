"""Tasks: what the answer to a clip is, and how its prompt asks for it (issue 38, docs/languages.md).

`transcribe` (the default: the answer is the clip's transcript) and `translate` (the answer is a
translation, read from the row's target column, into the source's `target_language`) are built in.
A task of one's own is registered like a source kind, with one line in a plug-in module
(speechlm.plugins): `register(Task("describe", "Describe everything you hear."))`. A shard recipe names
it (`task: describe`, `target_column: caption`); its clips carry `task` and `target_text`, and the
prompt is its template (speechlm.text.task_prompt; `{language}`-free, the language note is added
when the clip's language is given).
"""

from __future__ import annotations

from dataclasses import dataclass

from speechlm import plugins, text
from speechlm.config import ConfigError


@dataclass(frozen=True)
class Task:
    name: str
    # the instruction; "{prompt}" is the model's transcription prompt, "{target}" the target language's name
    template: str
    # the answer comes from a column of its own (a translation, a caption), not the transcript
    needs_target: bool = True
    # the answer is in another language, named by the recipe's target_language
    needs_target_language: bool = False


_TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    if not task.name or not all(c.isalnum() or c == "_" for c in task.name):
        raise ValueError(f"a task's name is letters, digits and '_', got {task.name!r}")
    _TASKS[task.name] = task
    return task


register(Task(text.TRANSCRIBE, text.TASK_TEMPLATES[text.TRANSCRIBE], needs_target=False))
register(Task(text.TRANSLATE, text.TASK_TEMPLATES[text.TRANSLATE], needs_target_language=True))


def get(name: str, key: str = "task") -> Task:
    """The registered task called `name` (the plug-ins' too); ConfigError naming `key` otherwise."""
    plugins.load()
    try:
        return _TASKS[name]
    except KeyError:
        raise ConfigError(f"{key}: unknown task {name!r} (known: {', '.join(sorted(_TASKS))})") from None


def templates() -> dict[str, str]:
    """task name -> prompt template, for every registered task (the collator's and generation's table)."""
    plugins.load()
    return {name: t.template for name, t in _TASKS.items()}
