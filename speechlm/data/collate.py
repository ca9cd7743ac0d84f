"""The collator: clips + transcripts -> the batch format of docs/design.md ("Batches").

Each example is `prompt_ids(n audio placeholders)` (the exact ids inference uses) followed by
`target_ids(transcript)` (transcript + the template's end-of-turn token); labels are -100 everywhere
but the target.
The encoder family (speechlm.model.encoders) gives the features and the placeholder count.
It runs inside DataLoader workers, so it must pickle (a tokenizer and a family do).
"""

from __future__ import annotations

import numpy as np
import torch

from speechlm import text
from speechlm.audio import SAMPLE_RATE

IGNORE = -100


class Collator:
    def __init__(
        self, tokenizer, *, prompt: str, audio_token: str, family, pool_stride: int, system_prompt: str | None = None
    ):
        self.tokenizer = tokenizer
        self.prompt = prompt
        self.system_prompt = system_prompt
        self.audio_token = audio_token
        self.family = family
        self.pool_stride = int(pool_stride)
        self.features = family.features
        self.pad_id = tokenizer.pad_token_id
        self.min_samples = self.features.min_samples  # shorter clips have no feature frame: the reader drops them
        self.max_seconds = family.max_seconds  # the loaders refuse shard sets with longer clips
        text.audio_token_id(tokenizer, audio_token)  # fail here, not in a worker, if it is missing
        # the prompt depends only on the placeholder count, which takes few distinct values
        self._prompts: dict[int, list[int]] = {}

    @classmethod
    def from_config(cls, cfg, tokenizer, family) -> Collator:
        """`family`: the run's encoder family (speechlm.model.encoders), resolved once by the caller
        (the trainer holds it), so the data layer never looks a model up."""
        m = cfg.model
        return cls(
            tokenizer,
            prompt=m.prompt,
            audio_token=m.audio_token,
            family=family,
            pool_stride=m.projector_pool_stride,
            system_prompt=m.system_prompt,
        )

    def prompt_ids(self, n_audio: int) -> list[int]:
        ids = self._prompts.get(n_audio)
        if ids is None:
            ids = self._prompts[n_audio] = text.prompt_ids(
                self.tokenizer, n_audio, self.prompt, self.audio_token, self.system_prompt
            )
        return ids

    @property
    def bytes_per_audio_second(self) -> float:
        """Bytes a batch takes per second of padded audio: the float32 features and their int64 mask
        (token ids and labels add well under 1%)."""
        return self.features.frames_per_second * (4 * self.features.feature_size + 8)

    def num_audio_tokens(self, num_samples: int) -> int:
        return self.family.audio_token_count(num_samples, self.pool_stride)

    def __call__(self, samples: list[dict]) -> dict:
        """samples: dicts with "id", "text", "audio" (1-D float32 at 16 kHz), optional "weight"."""
        if not samples:
            raise ValueError("Collator got an empty batch")
        waves = [np.asarray(s["audio"], dtype=np.float32) for s in samples]
        input_features, feature_mask = self.features(waves)
        seqs, labels = [], []
        for s, w in zip(samples, waves):
            p = self.prompt_ids(self.num_audio_tokens(len(w)))
            t = text.target_ids(self.tokenizer, s["text"])
            seqs.append(p + t)
            labels.append([IGNORE] * len(p) + t)
        S = max(len(x) for x in seqs)
        B = len(samples)
        input_ids = torch.full((B, S), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((B, S), dtype=torch.long)
        label_t = torch.full((B, S), IGNORE, dtype=torch.long)
        for i, (x, y) in enumerate(zip(seqs, labels)):
            input_ids[i, : len(x)] = torch.tensor(x)
            attention_mask[i, : len(x)] = 1
            label_t[i, : len(y)] = torch.tensor(y)
        return {
            "input_features": input_features,
            "feature_mask": feature_mask,
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": label_t,
            "weight": torch.tensor([float(s.get("weight", 1.0)) for s in samples], dtype=torch.float32),
            "ids": [str(s["id"]) for s in samples],
            "audio_seconds": torch.tensor([len(w) / SAMPLE_RATE for w in waves], dtype=torch.float32),
        }


class Clips:
    """A collator that hands the decoded clips over as they are, `{"clips": [{"id", "text", "audio"}]}`
    plus `"words"` (true word times) where the shard carries them (eval and transcription take waves,
    not token batches); weight-0 padding clips are left out."""

    KEYS = ("id", "text", "audio", "words")

    def __call__(self, samples: list[dict]) -> dict:
        return {"clips": [{k: s[k] for k in self.KEYS if k in s} for s in samples if s.get("weight", 1.0) > 0]}
