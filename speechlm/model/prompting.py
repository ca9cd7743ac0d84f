"""How a SpeechLM is asked (speechlm.model.speechlm mixes this in): each clip's instruction, the answer
tokens given for it (a pin's opening, a caller's prefix), the opening read off an answer (the language
the model names), and the generation budget's tokens per second for the clip's language.
"""

from __future__ import annotations

from speechlm import text

from . import generation


class Prompting:
    """The prompt side of SpeechLM.transcribe (its `cfg`, `tokenizer` and decoder)."""

    def _asked(self, n: int, prefixes, language, task, context=None) -> tuple[list, list, list]:
        """(per clip: its language, the answer tokens given (a pin's opening, a prefix), its instruction).
        `language` (ISO 639-1) and `task` (transcribe, translate, or a task of `task_prompts`), one for
        every clip or a list of one per clip: the prompt states them (speechlm.text.task_prompt). A model
        trained to open its answer with the language (`answer_language`) is pinned to a given one (the
        opening is written for it) and detects it otherwise; its dicts say "language" (detected or
        pinned; None from a model that does not write it), and the opening is never part of the text
        (`_language_opened`). `context` (OpenAI's `prompt`: earlier words, names, spellings) follows the
        instruction in the user turn (`text.context_text`, `text.task_prompt`)."""
        if prefixes is not None and len(prefixes) != n:
            raise ValueError(f"{len(prefixes)} prefixes for {n} clips")
        langs, tasks = generation.per_clip(language, n, "language"), generation.per_clip(task, n, "task")
        prefixes = prefixes if prefixes is not None else [[] for _ in range(n)]
        into = ["en" if t == text.TRANSLATE else None for t in tasks]  # OpenAI's translations: into English
        given = [self._prefix_ids(p, lang, target) for p, lang, target in zip(prefixes, langs, into)]
        templates = getattr(self.cfg, "task_prompts", None)
        contexts = generation.per_clip(context, n, "context")
        contexts = [text.context_text(self.tokenizer, c, self.cfg.audio_token) for c in contexts]
        instructions = [
            text.task_prompt(self.cfg.prompt, t, lang, None, templates, c) for t, lang, c in zip(tasks, langs, contexts)
        ]
        return langs, given, instructions

    def _language_opened(self, answer: dict, pinned: str | None) -> dict:
        """An answer of a model that opens with the language: the opening's tokens taken off its text and
        ids (word times align the rest), the language it names kept as "language"."""
        ids = answer["ids"]
        if not text.opens(answer["text"]):
            return dict(answer, language=pinned)
        for k in range(1, len(ids) + 1):  # the opening's tokens: as many as the tokenizer cuts it into
            opening = self.tokenizer.decode(ids[:k], skip_special_tokens=True)
            if text.opens(opening):
                lang, rest = text.split_answer(opening)[0], ids[k:]
                words = self.tokenizer.decode(rest, skip_special_tokens=True).strip()
                return dict(answer, ids=rest, text=words, language=lang)
        return dict(answer, language=pinned)

    def _prefix_ids(self, prefix, language: str | None = None, target: str | None = None) -> list[int]:
        """The answer tokens of a prefix: ids as given, text as `text.target_ids` tokenizes a transcript
        (without its end-of-turn); a model that opens its answers with the language gets the opening of
        a given `language` first (a pin), naming the `target` language of a translation."""
        if language and getattr(self.cfg, "answer_language", False):
            opening = text.answer_prefix(language, target)
            if isinstance(prefix, str):
                prefix = opening + prefix.strip()
            else:
                prefix = self._prefix_ids(opening) + list(prefix)
        if isinstance(prefix, str):
            return list(self.tokenizer(prefix.strip(), add_special_tokens=False)["input_ids"]) if prefix.strip() else []
        ids = [int(i) for i in prefix]
        size = self._base_lm().get_input_embeddings().num_embeddings
        bad = [i for i in ids if not 0 <= i < size or i == self.audio_token_id]
        if bad:
            raise ValueError(f"a prefix holds ids {bad[:5]} that are not text tokens of the decoder ({size} rows)")
        return ids

    def token_rates(self, langs: list) -> float | list[float]:
        """The budget's tokens per second: `model.tokens_per_second`, or per clip its language's rate
        (`tokens_per_second_by_language`); a language not there, or one not given (the model detects
        it), gets the largest rate, so no language is cut short."""
        table = getattr(self.cfg, "tokens_per_second_by_language", None) or {}
        if not table:
            return self.cfg.tokens_per_second
        most = max([self.cfg.tokens_per_second, *table.values()])
        return [table.get(lang, most) if lang else most for lang in langs]
