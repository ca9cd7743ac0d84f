"""Non-speech clips with empty labels: the model learns to say nothing when nobody speaks.

Kinds: digital silence, coloured noise (white, pink, brown) at several levels, tones (one to three
sines, steady or gliding), and click trains. Each clip's kind, length, level and waveform come
from its seed. The source that emits them must set `keep_empty: true` (shards/demo.yaml), so the
empty labels reach the trainer as an answer of just the end-of-turn token.
"""

from __future__ import annotations

import random

import numpy as np

from speechlm.audio_checks import SAMPLE_RATE

KINDS = ("silence", "white", "pink", "brown", "tone", "clicks")
LEVELS_DBFS = (-60.0, -45.0, -30.0, -18.0)  # RMS of the noise kinds; tones and clicks draw too


def rows(cfg, split: str) -> list[tuple[str, str, tuple]]:
    """(orig_id, "", spec) for one split; spec = ("nonspeech", kind, seconds, level dBFS, seed)."""
    n = getattr(cfg, split)
    rng = random.Random(f"{cfg.seed}-{split}-nonspeech")
    out = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]  # every kind in every split, even a small one
        seconds = round(rng.uniform(1.0, 6.0), 2)
        level = rng.choice(LEVELS_DBFS)
        name = split if split == "train" else f"{split}-nonspeech"
        out.append((f"{name}-{i:05d}", "", ("nonspeech", kind, seconds, level, rng.randrange(2**31))))
    return out


def _coloured(g: np.random.Generator, n: int, exponent: float) -> np.ndarray:
    """Noise with power ~ 1/f^exponent (0 white, 1 pink, 2 brown), by shaping a white spectrum."""
    spec = np.fft.rfft(g.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / SAMPLE_RATE)
    f[0] = f[1]
    return np.fft.irfft(spec / f ** (exponent / 2), n)


def synthesize(spec: tuple) -> np.ndarray:
    """16 kHz mono float32 for a spec from rows()."""
    _, kind, seconds, level, seed = spec
    g = np.random.default_rng(seed)
    n = int(seconds * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    if kind == "silence":
        # digital zero, or a faint hiss as from a quiet room
        x = np.zeros(n) if g.random() < 0.5 else g.standard_normal(n)
        level = min(level, -60.0)
    elif kind in ("white", "pink", "brown"):
        x = _coloured(g, n, {"white": 0.0, "pink": 1.0, "brown": 2.0}[kind])
    elif kind == "tone":
        x = np.zeros(n)
        for _ in range(g.integers(1, 4)):
            f0, f1 = g.uniform(100, 3000, size=2)
            f1 = f0 if g.random() < 0.5 else f1  # steady or gliding
            x += np.sin(2 * np.pi * np.cumsum(np.linspace(f0, f1, n)) / SAMPLE_RATE + g.uniform(0, 2 * np.pi))
        x *= np.minimum(1.0, np.minimum(t, t[-1] - t) / 0.02)  # 20 ms ramps: no click at the edges
    else:  # clicks: short decaying impulses at random times
        x = np.zeros(n)
        for at in g.integers(0, max(1, n - 200), size=g.integers(2, 20)):
            x[at : at + 200] += g.choice([-1, 1]) * np.exp(-np.arange(min(200, n - at)) / 30.0)
    rms = float(np.sqrt(np.mean(x**2)))
    if rms > 0:
        # RMS at the level, unless that would clip (sparse clicks): then peak at 0.99, quieter
        x = x * min(10 ** (level / 20) / rms, 0.99 / float(np.abs(x).max()))
    return x.astype(np.float32)
