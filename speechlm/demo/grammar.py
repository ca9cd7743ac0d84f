"""The built-in corpus: short English sentences from a 52-word vocabulary, spoken by espeak-ng.

Sentences are distinct across splits (eval and test hold sentences never seen in train), cased
and punctuated. With `unseen_test`, that many test sentences contain words that occur nowhere in
train or eval (HELD_OUT), so the test split has two halves, named in the clip ids. Each clip gets
a voice, speed and pitch drawn from the recipe's lists. Everything is a function of the seed, and
espeak-ng renders the same input to the same samples.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from speechlm.audio import AudioError, decode, to_mono_16k
from speechlm.config import ConfigError


@dataclass
class SyntheticConfig:
    """The built-in espeak-ng corpus: distinct sentences per split, random voice/speed/pitch per clip."""

    train: int = 400
    eval: int = 40
    test: int = 40
    # how many of the test sentences contain words never heard in train or eval (the rest use only
    # training words): the two halves whose WER the demo reports apart
    unseen_test: int = 0
    voices: list[str] = field(
        default_factory=lambda: ["en-us", "en-us+f3", "en-gb+m3", "en-gb-x-rp+f2", "en-gb-scotland", "en-029+m5"]
    )
    speeds: list[int] = field(default_factory=lambda: [140, 160, 180])  # words per minute
    pitches: list[int] = field(default_factory=lambda: [35, 50, 65])
    seed: int = 0
    # grammar: the sentences above; listen: random word orders and sentences, test split in parts
    # (speechlm.demo.corpus); nonspeech: silence, noise, tones and clicks with empty labels
    # (speechlm.demo.nonspeech; the source needs keep_empty: true)
    corpus: Literal["grammar", "listen", "nonspeech"] = "grammar"
    vocabulary: int = 0  # listen: words from faker's English list added to the grammar's 52
    random_share: float = 0.5  # listen: share of training clips that are random word orders
    random_test: int = 0  # listen: test clips that are random word orders (eval gets its share)
    # up to this much digital silence before and after each speech clip, drawn per clip by seed:
    # espeak-ng starts speaking at the first sample, and a model that never heard a clip open with
    # silence answers "nothing" to one that does (docs/benchmarks.md, "Silence before speech")
    silence_seconds: float = 0.0


NAMES = ["John", "Mary", "Anna", "Peter", "Sarah", "David", "Emma", "James"]
PLACES = ["London", "Paris", "Berlin", "Boston", "Rome", "Dublin"]
NOUNS = ["dog", "cat", "car", "book", "house", "garden", "letter", "river", "table", "window"]
ADJECTIVES = ["red", "big", "small", "new", "green", "quiet", "old", "yellow"]
VERBS = ["saw", "found", "liked", "painted", "sold", "bought", "washed", "opened"]
TIMES = ["yesterday", "today"]
# Words that never occur in train or eval: the "unseen" half of the test split is made of sentences
# holding at least one of them, to measure whether a model transcribes what it hears or what it
# has learned to expect.
HELD_OUT = {
    "N": ["Oliver", "Grace"],
    "P": ["Madrid", "Chicago"],
    "n": ["piano", "basket"],
    "a": ["bright", "heavy"],
    "v": ["carried", "borrowed"],
}
# with "the a and went to is in did see near": 52 words in all
TEMPLATES = [
    "{N} {v} {M}.",
    "{N} went to {P}.",
    "{N} went to {P} {t}.",
    "{N} and {M} went to {P}.",
    "{N} {v} the {a} {n}.",
    "{T}, {N} {v} a {a} {n}.",
    "Did {N} see the {n}?",
    "Did {N} see the {a} {n} in {P}?",
    "The {n} is {a}.",
    "The {a} {n} is in {P}.",
    "{N} {v} the {n} near the {o}.",
    # long templates with independent slots: too many sentences to memorize, so a model must listen
    "{N} {v} the {a} {n} near the {o} in {P}.",
    "{T}, {N} and {M} {v} a {a} {n} in {P}.",
    "Did {N} see the {a} {n} near the {o} {t}?",
    "The {a} {n} near the {o} is in {P} {t}.",
]
_FIXED = {"the", "a", "and", "went", "to", "is", "in", "did", "see", "near"}
VOCABULARY = sorted(set(NAMES + PLACES + NOUNS + ADJECTIVES + VERBS + TIMES) | _FIXED)
HELD_OUT_WORDS = frozenset(w for ws in HELD_OUT.values() for w in ws)


def _sentence(rng: random.Random, held_out: bool = False) -> str:
    """One sentence; with held_out, slots may also take held-out words (the caller keeps those that do)."""
    pools = {"N": NAMES, "P": PLACES, "n": NOUNS, "a": ADJECTIVES, "v": VERBS}
    if held_out:
        pools = {k: v + HELD_OUT[k] for k, v in pools.items()}
    tpl = rng.choice(TEMPLATES)
    n, m = rng.sample(pools["N"], 2)
    noun, other = rng.sample(pools["n"], 2)
    t = rng.choice(TIMES)
    return tpl.format(
        N=n,
        M=m,
        P=rng.choice(pools["P"]),
        n=noun,
        o=other,
        a=rng.choice(pools["a"]),
        v=rng.choice(pools["v"]),
        t=t,
        T=t.capitalize(),
    )


def has_unseen_word(sentence: str) -> bool:
    return any(w.strip(",.?") in HELD_OUT_WORDS for w in sentence.split())


def _distinct(rng: random.Random, need: int, held_out: bool) -> list[str]:
    seen: dict[str, None] = {}
    tries = 0
    while len(seen) < need:
        s = _sentence(rng, held_out)
        if has_unseen_word(s) == held_out:
            seen.setdefault(s)
        tries += 1
        if tries > 50 * need + 1000:
            raise ConfigError(f"synthetic: cannot make {need} distinct sentences from the built-in grammar")
    return list(seen)


def sentences(counts: dict[str, int], seed: int, unseen_test: int = 0) -> dict[str, list[str]]:
    """Distinct sentences per split; no sentence appears in two splits. The last `unseen_test` of
    the test split hold held-out words; every other sentence uses only the training vocabulary."""
    if not 0 <= unseen_test <= counts.get("test", 0):
        raise ConfigError(
            f"synthetic.unseen_test: must be between 0 and synthetic.test ({counts.get('test', 0)}), got {unseen_test}"
        )
    rng = random.Random(seed)
    pool = _distinct(rng, sum(counts.values()) - unseen_test, held_out=False)
    out, start = {}, 0
    for split, k in counts.items():
        k -= unseen_test if split == "test" else 0
        out[split] = pool[start : start + k]
        start += k
    if unseen_test:  # drawn after the seen pool, so the other splits don't change with this count
        out["test"] += _distinct(random.Random(f"{seed}-unseen"), unseen_test, held_out=True)
    return out


def rows(cfg, split: str) -> list[tuple[str, str, tuple]]:
    """(orig_id, text, audio spec) for one split of a synthetic source config with corpus: grammar."""
    counts = {s: getattr(cfg, s) for s in ("train", "eval", "test")}
    texts = sentences(counts, cfg.seed, cfg.unseen_test)[split]
    rng = random.Random(f"{cfg.seed}-{split}-voices")
    out = []
    for i, text in enumerate(texts):
        # test ids name their half ("test-seen-00003", "test-unseen-00001"): a part (speechlm.scoring.by_part)
        half = "unseen" if has_unseen_word(text) else "seen"
        name = f"{split}-{half}" if split == "test" and cfg.unseen_test else split
        spec = (text, rng.choice(cfg.voices), rng.choice(cfg.speeds), rng.choice(cfg.pitches))
        out.append((f"{name}-{i:05d}", text, spec))
    return out


def check_espeak(voices: list[str], key: str) -> None:
    """Fail fast, naming the key, rather than count every clip of a bad voice as a drop."""
    if shutil.which("espeak-ng") is None:
        raise ConfigError("the synthetic source needs espeak-ng: apt-get install espeak-ng")
    for v in voices:
        proc = subprocess.run(["espeak-ng", "-v", v, "--stdout", "a"], capture_output=True, check=False)
        if proc.returncode != 0 or not proc.stdout:
            raise ConfigError(f"{key}.synthetic.voices: espeak-ng has no voice {v!r} (see espeak-ng --voices=en)")


def synthesize(spec: tuple) -> np.ndarray:
    """16 kHz mono float32 speech for (text, voice, words per minute, pitch)."""
    text, voice, speed, pitch = spec
    proc = subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "--stdout", text],
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0 or not proc.stdout:
        raise AudioError(f"espeak-ng failed for voice {voice!r}: {proc.stderr.decode(errors='replace').strip()}")
    wave, sr = decode(proc.stdout)
    return to_mono_16k(wave, sr)
