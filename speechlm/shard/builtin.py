"""The built-in corpora of a `kind: synthetic` source, by its `synthetic.corpus`: the grammar
sentences (speechlm.shard.synthetic), the listening corpus (speechlm.shard.corpus) or non-speech
clips (speechlm.shard.nonspeech)."""

from __future__ import annotations

import numpy as np

from speechlm.shard import corpus, nonspeech, synthetic

MODULES = {"grammar": synthetic, "listen": corpus, "nonspeech": nonspeech}


def rows(cfg, split: str) -> list[tuple[str, str, tuple]]:
    """(orig_id, text, audio spec) for one split of a synthetic source config."""
    return MODULES[cfg.corpus].rows(cfg, split)


def synthesize(spec: tuple) -> np.ndarray:
    """16 kHz mono float32 for a spec from rows()."""
    return nonspeech.synthesize(spec) if spec[0] == "nonspeech" else synthetic.synthesize(spec)
