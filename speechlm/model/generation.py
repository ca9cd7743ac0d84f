"""Rules that make generation stop: a token budget from the clip's duration, and repeated n-gram
loops cut off. Both are transformers StoppingCriteria, so greedy and beam search honour them.

A speech-LLM that loses the audio keeps talking ("the the the ...", a sentence over and over)
until a fixed cap; on non-speech it may ramble. Speech carries a bounded number of words per
second, so the budget is `tokens_per_second * seconds + margin` per clip (at most
`max_new_tokens`), and a row whose last tokens repeat one n-gram `loop_min_repeats` times stops
there and keeps one copy of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from transformers import StoppingCriteria


def token_budget(
    seconds: list[float],
    tokens_per_second: float | list[float],
    margin: int,
    ceiling: int,
    given: list[int] | None = None,
) -> list[int]:
    """New tokens allowed per clip: rate x duration + margin, capped by `ceiling`; a rate <= 0 gives
    the clip the ceiling (the fixed cap of old). `tokens_per_second`: one rate, or one per clip (its
    language's, `model.tokens_per_second_by_language`). `given`: per clip, the tokens of the answer a caller
    already wrote (a prefix the model continues); they spend the budget as generated ones would, so an
    answer is bounded alike with or without a prefix (at least one new token: the model may still
    close the turn)."""
    given = [0] * len(seconds) if given is None else given
    if len(given) != len(seconds):
        raise ValueError(f"{len(given)} prefix lengths for {len(seconds)} clips")
    rates = (
        list(tokens_per_second) if isinstance(tokens_per_second, (list, tuple)) else [tokens_per_second] * len(seconds)
    )
    if len(rates) != len(seconds):
        raise ValueError(f"{len(rates)} rates for {len(seconds)} clips")
    whole = [ceiling if r <= 0 else min(ceiling, math.ceil(r * s) + margin) for r, s in zip(rates, seconds)]
    return [max(1, w - g) for w, g in zip(whole, given)]


def loop_at(tokens: list[int], max_ngram: int, min_repeats: int) -> tuple[int, int] | None:
    """(n, start) when `tokens` end with one n-gram repeated at least `min_repeats` times in a row
    (the smallest such n), start being where the repeats begin; None otherwise."""
    for n in range(1, max_ngram + 1):
        if len(tokens) < n * min_repeats:
            break
        unit = tokens[-n:]
        reps = 1
        while len(tokens) >= n * (reps + 1) and tokens[len(tokens) - n * (reps + 1) : len(tokens) - n * reps] == unit:
            reps += 1
        if reps >= min_repeats:
            return n, len(tokens) - n * reps
    return None


class TokenBudget(StoppingCriteria):
    """Stops each row at its own budget of new tokens (generate's max_new_tokens is one per batch)."""

    def __init__(self, budgets: list[int], eos_id: int):
        self.budgets = torch.tensor(budgets)
        self.eos_id = eos_id
        self.start: int | None = None
        self.hit = [False] * len(budgets)  # rows stopped by their budget before saying end-of-turn

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        if self.start is None:  # first call: one new token has been appended to the prompt (if any)
            self.start = input_ids.shape[1] - 1
        done = (input_ids.shape[1] - self.start) >= self.budgets.to(input_ids.device)
        ended = (input_ids[:, self.start :] == self.eos_id).any(-1)
        for i in (done & ~ended).nonzero().flatten().tolist():
            self.hit[i] = True
        return done


@dataclass
class LoopStop(StoppingCriteria):
    """Stops a row whose new tokens end in a repeated n-gram loop; `cut[i]` is where row i's kept
    new tokens end (one copy of the repeated unit), None for rows that never looped. `prefixes`: per
    row, the answer tokens a caller gave before the new ones; a loop is looked for over both (a loop the
    model goes on with is one), and the cut falls among the new tokens (0: none kept), never in the
    given text."""

    batch: int
    max_ngram: int
    min_repeats: int
    eos_id: int
    start: int | None = None
    cut: list = field(default_factory=list)
    prefixes: list | None = None

    def __post_init__(self):
        self.cut = [None] * self.batch
        self.prefixes = [[] for _ in range(self.batch)] if self.prefixes is None else [list(p) for p in self.prefixes]
        if len(self.prefixes) != self.batch:
            raise ValueError(f"{len(self.prefixes)} prefixes for a batch of {self.batch}")

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        if self.start is None:
            self.start = input_ids.shape[1] - 1
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        new = input_ids[:, self.start :].tolist()
        for i, row in enumerate(new):
            if self.cut[i] is not None:
                done[i] = True
                continue
            if self.eos_id in row:  # finished: what follows is padding, not a loop
                continue
            given = self.prefixes[i]
            found = loop_at(given + row, self.max_ngram, self.min_repeats)
            if found is not None:
                n, begin = found
                self.cut[i] = max(0, begin + n - len(given))
                done[i] = True
        return done


def per_clip(value, n: int, what: str) -> list:
    """One value per clip: a list as given (of n), or one value for every clip."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{len(value)} values of {what} for {n} clips")
        return list(value)
    return [value] * n
