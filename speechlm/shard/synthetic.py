"""The built-in corpus: short English sentences from a 42-word vocabulary, spoken by espeak-ng.

Sentences are distinct across splits (eval and test hold sentences never seen in train), cased
and punctuated; each clip gets a voice, speed and pitch drawn from the recipe's lists. Everything
is a function of the seed, and espeak-ng renders the same input to the same samples.
"""
from __future__ import annotations

import random
import shutil
import subprocess

import numpy as np

from speechlm.audio import AudioError, decode, to_mono_16k
from speechlm.config import ConfigError

NAMES = ["John", "Mary", "Anna", "Peter", "Sarah", "David"]
PLACES = ["London", "Paris", "Berlin", "Boston"]
NOUNS = ["dog", "cat", "car", "book", "house", "garden", "letter", "river"]
ADJECTIVES = ["red", "big", "small", "new", "green", "quiet"]
VERBS = ["saw", "found", "liked", "painted", "sold", "bought"]
TIMES = ["yesterday", "today"]
# with "the a and went to is in did see near": 42 words in all
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
VOCABULARY = sorted(
    set(NAMES + PLACES + NOUNS + ADJECTIVES + VERBS + TIMES)
    | {"the", "a", "and", "went", "to", "is", "in", "did", "see", "near"}
)


def _sentence(rng: random.Random) -> str:
    tpl = rng.choice(TEMPLATES)
    n, m = rng.sample(NAMES, 2)
    noun, other = rng.sample(NOUNS, 2)
    t = rng.choice(TIMES)
    return tpl.format(
        N=n, M=m, P=rng.choice(PLACES), n=noun, o=other, a=rng.choice(ADJECTIVES),
        v=rng.choice(VERBS), t=t, T=t.capitalize(),
    )


def sentences(counts: dict[str, int], seed: int) -> dict[str, list[str]]:
    """Distinct sentences per split; no sentence appears in two splits."""
    rng = random.Random(seed)
    need = sum(counts.values())
    seen: dict[str, None] = {}
    tries = 0
    while len(seen) < need:
        seen.setdefault(_sentence(rng))
        tries += 1
        if tries > 50 * need + 1000:
            raise ConfigError(f"synthetic: cannot make {need} distinct sentences from the built-in grammar")
    pool = list(seen)
    out, start = {}, 0
    for split, k in counts.items():
        out[split] = pool[start : start + k]
        start += k
    return out


def rows(cfg, split: str) -> list[tuple[str, str, tuple]]:
    """(orig_id, text, audio spec) for one split of a synthetic source config."""
    counts = {s: getattr(cfg, s) for s in ("train", "eval", "test")}
    texts = sentences(counts, cfg.seed)[split]
    rng = random.Random(f"{cfg.seed}-{split}-voices")
    return [
        (f"{split}-{i:05d}", text, (text, rng.choice(cfg.voices), rng.choice(cfg.speeds), rng.choice(cfg.pitches)))
        for i, text in enumerate(texts)
    ]


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
        capture_output=True, check=False,
    )
    if proc.returncode != 0 or not proc.stdout:
        raise AudioError(f"espeak-ng failed for voice {voice!r}: {proc.stderr.decode(errors='replace').strip()}")
    wave, sr = decode(proc.stdout)
    return to_mono_16k(wave, sr)
