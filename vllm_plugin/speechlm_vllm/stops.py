"""speechlm's stop rules under vLLM: the per-clip token budget and the repetition (loop) cut.

speechlm stops a clip's generation at `token_budget(seconds)` new tokens (the clip's duration times
`tokens_per_second`, plus `new_tokens_margin`, at most `max_new_tokens`), and at the first token after
which the row ends in one n-gram repeated `loop_min_repeats` times, keeping one copy of it
(speechlm_generation.token_budget and loop_at, read from the folder). vLLM gets them in two halves:

- the engine: `SpeechLMStops` (logits.py) ends a request with its end-of-turn token once it has its
  budget of tokens or a loop, so no token is generated past where speechlm stops;
- the output: `cut_loop` drops the repeats after the first copy, which speechlm drops too.

The budget needs the clip's length. A request built here (`offline.py`, the server's prompt) carries it
exactly in `SamplingParams.extra_args["speechlm_budget"]` when the caller builds the parameters; else
the engine sees only the prompt, so the budget comes from its placeholder count: the longest clip that
gets that many placeholders (`budget_for_placeholders`), which differs from the exact budget by at most
ceil(tokens_per_second x the seconds one placeholder spans) tokens, and never cuts shorter.
"""

from __future__ import annotations

from .folder import SAMPLE_RATE, Folder

EXTRA_KEY = "speechlm_budget"


def budget(folder: Folder, num_samples: int, language: str | None = None, given: int = 0) -> int:
    """speechlm's budget of new tokens for a clip of `num_samples` (speechlm_generation.token_budget): the
    rate of its pinned `language`, or the largest for one the model detects (Prompting.token_rates), less
    the `given` tokens of a pin's opening, which spend it as generated ones do."""
    s = folder.settings
    table = getattr(s, "tokens_per_second_by_language", None) or {}
    most = max([s.tokens_per_second, *table.values()])
    rate = table.get(language, most) if language else most
    seconds = [num_samples / SAMPLE_RATE]
    return folder.generation.token_budget(seconds, rate, s.new_tokens_margin, s.max_new_tokens, [given])[0]


def longest_clip(folder: Folder, n_audio: int) -> int:
    """The most samples a clip can have and still get `n_audio` placeholders (the count is monotone in
    the length: a binary search over the family's own audio_token_count)."""
    hi = folder.max_samples or 4 * 3600 * SAMPLE_RATE
    if folder.audio_tokens(hi) <= n_audio:
        return hi
    lo = 1  # audio_tokens(lo) <= n_audio <  audio_tokens(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if folder.audio_tokens(mid) <= n_audio:
            lo = mid
        else:
            hi = mid
    return lo


def budget_for_placeholders(folder: Folder, n_audio: int, language: str | None = None, given: int = 0) -> int:
    return budget(folder, longest_clip(folder, n_audio), language, given)


def loop_end(folder: Folder, tokens: list[int]) -> int | None:
    """Where speechlm's loop rule stops a row and cuts it: the kept length (begin of the repeats plus one
    copy) at the first token after which the row ends in a loop; None when it never does. speechlm
    checks after every token (LoopStop), so the first prefix that loops decides."""
    s = folder.settings
    if s.loop_max_ngram <= 0:
        return None
    for k in range(1, len(tokens) + 1):
        found = folder.generation.loop_at(tokens[:k], s.loop_max_ngram, s.loop_min_repeats)
        if found is not None:
            n, begin = found
            return begin + n
    return None


def loops_now(folder: Folder, tokens: list[int]) -> bool:
    """Whether the row, as it is, ends in a loop (the engine's check after each new token)."""
    s = folder.settings
    return s.loop_max_ngram > 0 and folder.generation.loop_at(tokens, s.loop_max_ngram, s.loop_min_repeats) is not None


def cut_loop(folder: Folder, tokens: list[int]) -> list[int]:
    """The new tokens speechlm keeps: up to the end-of-turn token, and one copy of a loop."""
    eot = folder.end_of_turn_id
    if eot in tokens:
        tokens = tokens[: tokens.index(eot)]
    end = loop_end(folder, list(tokens))
    return list(tokens[:end]) if end is not None else list(tokens)


def text_of(folder: Folder, tokens: list[int]) -> str:
    """speechlm's text of a clip's new tokens (SpeechLM.transcribe: loop cut, special tokens skipped, stripped,
    the language's opening taken off)."""
    return answer_text(folder, folder.tokenizer.decode(cut_loop(folder, tokens), skip_special_tokens=True).strip())


def answer_text(folder: Folder, text: str) -> str:
    """The answer without the opening that names its language ("language Spanish: hola" -> "hola") for a
    model trained to open with it (`answer_language`), as speechlm's text never holds it: a clip asked no
    language names the one it hears (a pinned clip's opening is in its prompt, not in its output)."""
    if getattr(folder.settings, "answer_language", False):
        return folder.text.split_answer(text)[1]
    return text


def cut_text(folder: Folder, text: str) -> str:
    """The loop cut on text only (the server's post-processing sees no token ids): the text's tokens,
    cut as `cut_loop` cuts them, decoded again; text without a loop comes back stripped, unchanged."""
    ids = folder.tokenizer(text, add_special_tokens=False)["input_ids"]
    end = loop_end(folder, ids)
    if end is None:
        return answer_text(folder, text.strip())
    return answer_text(folder, folder.tokenizer.decode(ids[:end], skip_special_tokens=True).strip())
