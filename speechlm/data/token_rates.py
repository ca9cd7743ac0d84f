"""Tokens per second of speech per spoken language, measured on the training shards with the decoder's
tokenizer (issue 38): the generation budget (`model.tokens_per_second_by_language`,
speechlm.model.generation.token_budget) must not cut a character language short, and a byte-level BPE
spends several tokens on one hanzi or kana where an English word takes one or two.

The clips that state their language in the manifest (a shard's `languages`) are sampled shard by shard
in manifest order, up to `per_language` transcription clips per language; each clip's JSON (its text and
duration) is read from its tar without its audio. A language's rate is the larger of twice its mean
(English's default of 8 is about twice its 3-4 tokens a second) and its 95th percentile clip, rounded up
to a tenth.
"""

from __future__ import annotations

import json
import logging
import math
import tarfile
from pathlib import Path

import numpy as np

from speechlm.audio_checks import SAMPLE_RATE
from speechlm.data import remote
from speechlm.data.catalog import read_manifest

log = logging.getLogger(__name__)

PER_LANGUAGE = 200  # clips a language's rate is measured on


def _shards(sets) -> list[tuple[Path, dict]]:
    """(tar path, manifest entry) of every local shard whose clips state their languages."""
    out = []
    for k, ds in enumerate(sets):
        if remote.is_url(str(ds.path)):
            log.info("tokens per second: %s is not local; its clips are not sampled", ds.path)
            continue
        split = read_manifest(ds.path, f"data.train[{k}].path")["splits"].get(ds.split, {})
        out += [(Path(ds.path) / sh["file"], sh) for sh in split.get("shards", []) if "languages" in sh]
    return out


def _clips(path: Path, wanted: set[str]) -> list[dict]:
    """The JSON of the transcription clips of one tar whose language is in `wanted`."""
    clips = []
    with tarfile.open(path) as tar:  # a local file: members are found by seeking past the audio
        for m in tar:
            if m.name.endswith(".json"):
                j = json.loads(tar.extractfile(m).read())
                if j.get("language") in wanted and j.get("task", "transcribe") == "transcribe" and j.get("text"):
                    clips.append(j)
    return clips


def sample(sets, per_language: int = PER_LANGUAGE) -> dict[str, list[tuple[str, float]]]:
    """language -> up to `per_language` (text, seconds) of its transcription clips in the sets."""
    got: dict[str, list] = {}
    for path, sh in _shards(sets):
        wanted = {lang for lang in sh["languages"] if lang and len(got.get(lang, [])) < per_language}
        if not wanted:
            continue
        for j in _clips(path, wanted):
            if len(got.setdefault(j["language"], [])) < per_language and j["duration"] > 0:
                got[j["language"]].append((j["text"], float(j["duration"])))
    return got


def rate(tokenizer, clips: list[tuple[str, float]]) -> float:
    """A budget's tokens per second for these (text, seconds): max(2 x mean, 95th percentile), a tenth up."""
    tokens = np.array([len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t, _ in clips], float)
    seconds = np.array([s for _, s in clips], float)
    value = max(2 * tokens.sum() / seconds.sum(), float(np.percentile(tokens / seconds, 95)))
    return math.ceil(value * 10) / 10


def measure(sets, tokenizer, per_language: int = PER_LANGUAGE) -> dict[str, float]:
    """language -> the budget's tokens per second, for every language the sets' clips state."""
    rates = {lang: rate(tokenizer, clips) for lang, clips in sorted(sample(sets, per_language).items()) if clips}
    if rates:
        log.info("tokens per second by language (measured on the training shards): %s", rates)
    return rates


def fill(model, sets) -> None:
    """Set `model.cfg.tokens_per_second_by_language` from the training shards when the model lists its
    languages and the config gives no rates (a config's own rates are kept)."""
    cfg = model.cfg
    if getattr(cfg, "languages", None) and not getattr(cfg, "tokens_per_second_by_language", None):
        cfg.tokens_per_second_by_language = measure(sets, model.tokenizer)


def mean_rates(tokenizer, samples: dict[str, list[tuple[str, float]]]) -> dict[str, float]:
    """language -> its sampled transcripts' mean tokens per second (all their tokens over all their seconds)."""
    out = {}
    for lang, clips in sorted(samples.items()):
        seconds = sum(s for _, s in clips)
        if clips and seconds > 0:
            out[lang] = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t, _ in clips) / seconds
    return out


def clip_tokens(catalog, collator, sets, per_language: int = PER_LANGUAGE) -> np.ndarray | None:
    """Per gid, the decoder tokens a clip is estimated to take, for `data.bucket_by: tokens`: its audio
    placeholders (the collator's count for its duration) and its answer (the duration times its
    language's mean tokens per second, sampled from the sets' clips). A clip that states no language
    counts its audio alone (non-speech, whose answer is empty); a language not sampled (a remote set)
    gets the mean of those that were. None when no clip states a language: the durations then order
    the clips as the tokens would."""
    langs = catalog.languages()
    if not any(langs):
        log.info("data.bucket_by: tokens: no clip states its language, so durations order them as tokens would")
        return None
    rates = mean_rates(collator.tokenizer, sample(sets, per_language))
    if not rates:
        log.warning(
            "data.bucket_by: tokens: no clip of a stated language could be sampled (sets at a URL); "
            "batches are cut by duration"
        )
        return None
    known = sum(rates.values()) / len(rates)
    log.info("bucketing by tokens: %s text tokens per second by language", {k: round(v, 2) for k, v in rates.items()})
    audio = np.array([collator.num_audio_tokens(int(round(d * SAMPLE_RATE))) for d in catalog.durations], float)
    text = np.array([rates.get(lang, known) if lang else 0.0 for lang in langs], float) * catalog.durations
    return audio + text
