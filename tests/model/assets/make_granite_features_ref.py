"""Make tests/model/assets/granite_features_ref.npz with transformers' real GraniteSpeech5FeatureExtractor.

Run once in a side environment that has torchaudio (here: torch 2.9.1 + torchaudio 2.9 + transformers 5.24.0):
    /tmp/ta/bin/python tests/model/assets/make_granite_features_ref.py
"""

from pathlib import Path

import numpy as np
from transformers import GraniteSpeech5FeatureExtractor

rng = np.random.default_rng(1234)
lengths = [16000, 5000 + 37, 24321, 1600]
waves = []
for n in lengths:
    t = np.arange(n) / 16000
    w = 0.3 * np.sin(2 * np.pi * rng.uniform(100, 2000) * t) + 0.05 * rng.standard_normal(n)
    waves.append(w.astype(np.float32))
out = GraniteSpeech5FeatureExtractor()(waves, sampling_rate=16000, return_tensors="np")
np.savez_compressed(
    Path(__file__).with_name("granite_features_ref.npz"),
    n=len(waves),
    input_features=out["input_features"].astype(np.float32),
    attention_mask=out["attention_mask"],
    **{f"wave{i}": w for i, w in enumerate(waves)},
)
print(out["input_features"].shape, out["attention_mask"].sum(-1))
