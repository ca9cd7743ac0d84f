"""Whether each language's clips fit the CTC head (speechlm.model.ctc), checked at the start of a run.

CTC emits at most one target token per audio frame (two where a token repeats: a blank goes between), so
a clip whose target has more tokens than the projector has frames cannot be aligned: `zero_infinity`
turns its loss to 0 and the clip teaches the projector nothing, in the warm start and in the auxiliary
loss alike, without a word in the logs. A byte-level BPE spends several tokens on one kana or hanzi:
on the multilingual demo at `model.projector_pool_stride: 4` (12.5 frames per second) 109 of its 600
Japanese training clips did not fit (docs/languages.md, "Token cost per language"). This check samples the
training shards as `token_rates` does and logs, per language, how many clips do not fit at the run's
stride, and the stride at which they would.
"""

from __future__ import annotations

import logging

from speechlm.audio import SAMPLE_RATE
from speechlm.data import token_rates

log = logging.getLogger(__name__)


def needed_frames(ids: list[int]) -> int:
    """The fewest frames CTC aligns `ids` to: one per token, and a blank between two equal tokens."""
    return len(ids) + sum(a == b for a, b in zip(ids, ids[1:]))


def needs(model, clips: list[tuple[str, float]]) -> list[tuple[int, int]]:
    """Per (transcript, seconds) clip: (its samples, the frames its CTC target needs). The target is what
    was said (the collator's `Languages.spoken`): the transcript, without an answer's opening."""
    out = []
    for said, seconds in clips:
        ids = model.tokenizer(said.strip(), add_special_tokens=False)["input_ids"]
        out.append((int(seconds * SAMPLE_RATE), needed_frames(ids)))
    return out


def misfits(model, needed: list[tuple[int, int]], stride: int) -> int:
    """How many of the clips (`needs`) have fewer frames at projector stride `stride` than they need."""
    return sum(model.family.audio_token_count(samples, stride) < need for samples, need in needed)


def check(model, sets, per_language: int = token_rates.PER_LANGUAGE) -> dict[str, tuple[int, int]]:
    """language -> (clips that do not fit, clips sampled), for the languages the sets' clips state; a
    warning per language with misfits, naming the stride that would fit them all (up to the run's)."""
    stride = int(model.cfg.projector_pool_stride)
    out = {}
    for language, clips in sorted(token_rates.sample(sets, per_language).items()):
        needed = needs(model, clips)  # tokenized once, compared at every stride
        out[language] = (misfits(model, needed, stride), len(clips))
        if out[language][0]:
            fits = next((s for s in range(stride - 1, 0, -1) if not misfits(model, needed, s)), None)
            per_second = model.family.audio_token_count(SAMPLE_RATE * 10, stride) / 10
            log.warning(
                "CTC: %d of %d sampled %s clips have more target tokens than audio frames at "
                "model.projector_pool_stride=%d (%.1f frames per second): their CTC loss is 0, they teach the "
                "projector nothing; %s (docs/languages.md, 'Token cost per language')",
                *out[language],
                language,
                stride,
                per_second,
                f"at stride {fits} every sampled clip fits" if fits else "no smaller stride fits them all",
            )
    return out
