"""A test set with true word times: espeak-ng words spoken one by one, joined with measured gaps.

Each word is synthesized alone (espeak-ng, resampled to 16 kHz) and trimmed of its leading and
trailing silence: a sample is silent when its magnitude is below `trim_db` (default -40 dB, i.e. 1%)
of that word's own peak. The trimmed words are joined with digital silence of a seeded random
length (`gap_ms`, default 50-300 ms), and the clip opens and closes with such silence too
(`edge_ms`). So each word's start and end are exact, in samples: the first and one past the last
non-silent sample of its trimmed wave. The labels carry them, `"words": [{"text", "start", "end"}]`
in seconds (k / 16000, kept to 7 decimals: exact) beside `"text"`, which is the words joined by
spaces (the first capitalized, a full stop after the last: the demo's label style).

Word pools (`pools`), one per clip in turn and named in the clip id ("test-common-00003"):
- `common`: faker's English word list (MIT; speechlm.demo.corpus.word_list), homophones left out;
- `demo`: the built-in grammar's 52 words (speechlm.demo.grammar.VOCABULARY).
A clip's words are distinct (so matching a transcript to them is unambiguous), 4-10 by default.
Everything is a function of the seed; espeak-ng renders the same input to the same samples.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from dataclasses import dataclass, field

import numpy as np

from speechlm.audio import SAMPLE_RATE, AudioError
from speechlm.config import ConfigError
from speechlm.demo import corpus, grammar

POOLS = ("common", "demo")
TIME_DECIMALS = 7  # k / 16000 s has at most 7 decimals: the stored times are exact


@dataclass
class TimedConfig:
    """kind: timed. Clips per split, words per clip, voices and the silences between words."""

    train: int = 0
    eval: int = 0
    test: int = 60
    pools: list[str] = field(default_factory=lambda: list(POOLS))
    min_words: int = 4
    max_words: int = 10
    gap_ms: list[float] = field(default_factory=lambda: [50.0, 300.0])  # silence between words: [low, high]
    edge_ms: list[float] = field(default_factory=lambda: [50.0, 300.0])  # before the first and after the last
    trim_db: float = -40.0  # below this, relative to the word's peak, a leading/trailing sample is silence
    voices: list[str] = field(
        default_factory=lambda: ["en-us", "en-us+f3", "en-gb+m3", "en-gb-x-rp+f2", "en-gb-scotland", "en-029+m5"]
    )
    speeds: list[int] = field(default_factory=lambda: [140, 160, 180])
    pitches: list[int] = field(default_factory=lambda: [35, 50, 65])
    seed: int = 0


def validate(cfg: TimedConfig, key: str) -> None:
    for split in ("train", "eval", "test"):
        if getattr(cfg, split) < 0:
            raise ConfigError(f"{key}.{split}: must be >= 0, got {getattr(cfg, split)}")
    if cfg.train + cfg.eval + cfg.test == 0:
        raise ConfigError(f"{key}.test: a timed source needs at least one clip in some split")
    if not cfg.pools or any(p not in POOLS for p in cfg.pools):
        raise ConfigError(f"{key}.pools: expected a non-empty list of {', '.join(POOLS)}, got {cfg.pools!r}")
    if not 1 <= cfg.min_words <= cfg.max_words:
        raise ConfigError(f"{key}.min_words: need 1 <= min_words <= max_words, got {cfg.min_words} and {cfg.max_words}")
    if cfg.max_words > len(grammar.VOCABULARY) and "demo" in cfg.pools:
        raise ConfigError(f"{key}.max_words: the demo pool has {len(grammar.VOCABULARY)} words, got {cfg.max_words}")
    for name in ("gap_ms", "edge_ms"):
        r = getattr(cfg, name)
        if len(r) != 2 or not 0 <= r[0] <= r[1]:
            raise ConfigError(f"{key}.{name}: expected [low, high] with 0 <= low <= high, got {r!r}")
    if not -80 <= cfg.trim_db < 0:
        raise ConfigError(f"{key}.trim_db: must be in [-80, 0), got {cfg.trim_db}")
    for name in ("voices", "speeds", "pitches"):
        if not getattr(cfg, name):
            raise ConfigError(f"{key}.{name}: needs at least one value")


def check_espeak(voices: list[str], key: str) -> None:
    if shutil.which("espeak-ng") is None:
        raise ConfigError("the timed source needs espeak-ng: apt-get install espeak-ng")
    for v in voices:
        proc = subprocess.run(["espeak-ng", "-v", v, "--stdout", "a"], capture_output=True, check=False)
        if proc.returncode != 0 or not proc.stdout:
            raise ConfigError(f"{key}.voices: espeak-ng has no voice {v!r} (see espeak-ng --voices=en)")


def pool_words(pool: str) -> list[str]:
    if pool == "demo":
        return list(grammar.VOCABULARY)
    return sorted({w for w in corpus.word_list() if w.isalpha() and w not in corpus.HOMOPHONES})


def label_words(words: list[str]) -> list[str]:
    """The words as the label shows them: the first capitalized, a full stop after the last."""
    out = list(words)
    out[0] = out[0][:1].upper() + out[0][1:]
    out[-1] = out[-1] + "."
    return out


def rows(cfg: TimedConfig, split: str) -> list[tuple[str, str, dict]]:
    """(orig_id, text, audio ref) for one split; the ref holds everything fetch needs (JSON-safe)."""
    pools = {p: pool_words(p) for p in cfg.pools}
    # the splits draw from their own generators: a split's clips don't change with another's count
    rng = random.Random(f"{cfg.seed}-timed-{split}")
    out = []
    for i in range(getattr(cfg, split)):
        pool = cfg.pools[i % len(cfg.pools)]
        words = rng.sample(pools[pool], rng.randint(cfg.min_words, cfg.max_words))
        gaps = [round(rng.uniform(*cfg.gap_ms) / 1000, 3) for _ in range(len(words) - 1)]
        edges = [round(rng.uniform(*cfg.edge_ms) / 1000, 3) for _ in range(2)]
        ref = {
            "words": words,
            "labels": label_words(words),
            "voice": rng.choice(cfg.voices),
            "speed": rng.choice(cfg.speeds),
            "pitch": rng.choice(cfg.pitches),
            "gaps": gaps,
            "edges": edges,
            "trim_db": cfg.trim_db,
        }
        out.append((f"{split}-{pool}-{i:05d}", " ".join(ref["labels"]), ref))
    return out


def trim(wave: np.ndarray, trim_db: float) -> np.ndarray:
    """The wave from its first to its last sample at or above `trim_db` of its peak."""
    mag = np.abs(wave)
    peak = float(mag.max()) if len(mag) else 0.0
    if peak <= 0:
        raise AudioError("espeak-ng rendered a silent word")
    loud = np.flatnonzero(mag >= peak * 10 ** (trim_db / 20))
    return wave[loud[0] : loud[-1] + 1]


def synthesize(ref: dict) -> tuple[np.ndarray, list[dict]]:
    """(16 kHz mono float32 clip, [{"text", "start", "end"}] in seconds) for a ref from rows()."""
    parts, words, pos = [], [], 0
    silences = [ref["edges"][0], *ref["gaps"], ref["edges"][1]]
    for k, (word, label) in enumerate(zip(ref["words"], ref["labels"])):
        gap = np.zeros(int(round(silences[k] * SAMPLE_RATE)), np.float32)
        wave = trim(grammar.synthesize((word, ref["voice"], ref["speed"], ref["pitch"])), ref["trim_db"])
        pos += len(gap)
        words.append(
            {
                "text": label,
                "start": round(pos / SAMPLE_RATE, TIME_DECIMALS),
                "end": round((pos + len(wave)) / SAMPLE_RATE, TIME_DECIMALS),
            }
        )
        pos += len(wave)
        parts += [gap, wave]
    parts.append(np.zeros(int(round(silences[-1] * SAMPLE_RATE)), np.float32))
    return np.concatenate(parts).astype(np.float32), words
