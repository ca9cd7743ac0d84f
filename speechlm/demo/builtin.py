"""The built-in corpora of a `kind: synthetic` source, by its `synthetic.corpus`: the grammar
sentences (speechlm.demo.grammar), the listening corpus (speechlm.demo.corpus) or non-speech
clips (speechlm.demo.nonspeech)."""

from __future__ import annotations

import random

import numpy as np

from speechlm import audio
from speechlm.demo import corpus, grammar, nonspeech

MODULES = {"grammar": grammar, "listen": corpus, "nonspeech": nonspeech}


def rows(cfg, split: str) -> list[tuple[str, str, tuple]]:
    """(orig_id, text, audio spec) for one split of a synthetic source config."""
    out = MODULES[cfg.corpus].rows(cfg, split)
    if cfg.silence_seconds <= 0:
        return out
    # its own generator: the clips' texts and voices stay those drawn without silence
    rng = random.Random(f"{cfg.seed}-{split}-silence")
    pad = cfg.silence_seconds
    return [(o, t, ("silence", round(rng.uniform(0, pad), 3), round(rng.uniform(0, pad), 3), s)) for o, t, s in out]


def synthesize(spec: tuple) -> np.ndarray:
    """16 kHz mono float32 for a spec from rows()."""
    if spec[0] == "silence":
        _, before, after, inner = spec
        wave = synthesize(inner)
        sr = audio.SAMPLE_RATE
        return np.concatenate([np.zeros(int(before * sr), wave.dtype), wave, np.zeros(int(after * sr), wave.dtype)])
    return nonspeech.synthesize(spec) if spec[0] == "nonspeech" else grammar.synthesize(spec)
