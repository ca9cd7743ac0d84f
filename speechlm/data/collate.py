"""The collator: clips + transcripts -> the batch format of docs/design.md ("Batches").

Each example is `prompt_ids(n audio placeholders)` (the exact ids inference uses) followed by
`target_ids(transcript)` (transcript + the template's end-of-turn token); labels are -100 everywhere
but the target.
The encoder family (speechlm.model.encoders) gives the features and the placeholder count.
It runs inside DataLoader workers, so it must pickle (a tokenizer and a family do).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np
import torch

from speechlm import tasks, text
from speechlm.audio import SAMPLE_RATE

IGNORE = -100


@dataclass
class Languages:
    """How a clip's language and task labels (speechlm.shard.languages) make its prompt and answer:
    model.task_prompts with the registered tasks' templates, model.answer_language, model.language_dropout."""

    templates: dict = field(default_factory=dict)
    answer_language: bool = False
    dropout: float = 0.0
    served: tuple = ()  # model.languages: what a caller may pin on audio with no speech

    def turns(self, sample: dict, prompt: str) -> tuple[str, str]:
        """(the instruction, the answer) of a clip: a clip with no language and task `transcribe` is
        `prompt` and its transcript, as before tasks existed."""
        task, language = sample.get("task", text.TRANSCRIBE), sample.get("language")
        answer = sample["text"] if task == text.TRANSCRIBE else sample.get("target_text", "")
        if task != text.TRANSCRIBE and not answer:
            raise ValueError(f"clip {sample.get('id')}: task {task} has no target_text")
        clip_id = str(sample.get("id", ""))
        if self.no_speech(sample) and self.served and not self.dropped(clip_id):
            # a caller may pin a language on silence too: its answer is the pin's opening and nothing more
            language = self.served[zlib.crc32(clip_id.encode(), 1) % len(self.served)]
        stated = language if language and not self.dropped(clip_id) else None
        target = sample.get("target_language")
        instruction = text.task_prompt(prompt, task, stated, target, self.templates)
        if self.answer_language and (language or self.no_speech(sample)):
            into = (target or "en") if task == text.TRANSLATE else None
            answer = (text.answer_prefix(language, into) + answer).strip()
        return instruction, answer

    def no_speech(self, sample: dict) -> bool:
        """A clip of no speech: no language, nothing to transcribe (silence, noise: the demo's non-speech).
        With `answer_language` it is answered "language None:" when asked no language (text.NO_SPEECH)."""
        task = sample.get("task", text.TRANSCRIBE)
        return not sample.get("language") and not sample.get("text") and task == text.TRANSCRIBE

    def spoken(self, sample: dict) -> str | None:
        """What the CTC head aligns to a clip whose answer is not what was said: its transcript (a
        translation's, a task of one's own whose clip has one, and with `answer_language` every clip's:
        the opening names a language, nobody says it; non-speech is then taught all-blank); None when
        the answer is the transcript. CTC aligns sound to text in order, so an English translation of
        French speech would teach the projector English embeddings for French sound, and an opening
        would make it name the language at the clip's first frames, from their sound alone."""
        task, words = sample.get("task", text.TRANSCRIBE), sample.get("text")
        if task == text.TRANSCRIBE:  # opened (a language named, or None for no words): the words alone
            opened = self.answer_language and (sample.get("language") or not words)
            return (words or "") if opened else None
        return words or None

    def dropped(self, clip_id: str) -> bool:
        """Whether this clip's prompt leaves its language out: a fixed share `dropout` of clip ids."""
        return self.dropout > 0 and zlib.crc32(clip_id.encode()) / 2**32 < self.dropout


class Collator:
    def __init__(
        self,
        tokenizer,
        *,
        prompt: str,
        audio_token: str,
        family,
        pool_stride: int,
        system_prompt: str | None = None,
        languages: Languages | None = None,
    ):
        self.tokenizer = tokenizer
        self.prompt = prompt
        self.languages = languages or Languages()
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
            languages=Languages(
                {**tasks.templates(), **m.task_prompts}, m.answer_language, m.language_dropout, tuple(m.languages)
            ),
        )

    def prompt_ids(self, n_audio: int, instruction: str | None = None) -> list[int]:
        """The prompt of a clip with `n_audio` placeholders and its instruction (default: the prompt)."""
        instruction = self.prompt if instruction is None else instruction
        ids = self._prompts.get((n_audio, instruction))
        if ids is None:
            ids = self._prompts[(n_audio, instruction)] = text.prompt_ids(
                self.tokenizer, n_audio, instruction, self.audio_token, self.system_prompt
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
        seqs, labels, spoken, differs = [], [], [], False
        for s, w in zip(samples, waves):
            instruction, answer = self.languages.turns(s, self.prompt)
            p = self.prompt_ids(self.num_audio_tokens(len(w)), instruction)
            t = text.target_ids(self.tokenizer, answer)
            seqs.append(p + t)
            labels.append([IGNORE] * len(p) + t)
            said = self.languages.spoken(s)
            spoken.append(t if said is None else text.target_ids(self.tokenizer, said))
            differs |= said is not None
        S = max(len(x) for x in seqs)
        B = len(samples)
        input_ids = torch.full((B, S), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((B, S), dtype=torch.long)
        label_t = torch.full((B, S), IGNORE, dtype=torch.long)
        for i, (x, y) in enumerate(zip(seqs, labels)):
            input_ids[i, : len(x)] = torch.tensor(x)
            attention_mask[i, : len(x)] = 1
            label_t[i, : len(y)] = torch.tensor(y)
        batch = {
            "input_features": input_features,
            "feature_mask": feature_mask,
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": label_t,
            "weight": torch.tensor([float(s.get("weight", 1.0)) for s in samples], dtype=torch.float32),
            "ids": [str(s["id"]) for s in samples],
            "audio_seconds": torch.tensor([len(w) / SAMPLE_RATE for w in waves], dtype=torch.float32),
        }
        if differs:  # a clip's answer is not what was said: the CTC head aligns what was
            ctc = torch.full((B, max(map(len, spoken))), IGNORE, dtype=torch.long)
            for i, t in enumerate(spoken):
                ctc[i, : len(t)] = torch.tensor(t)
            batch["ctc_labels"] = ctc
        return batch


class Clips:
    """A collator that hands the decoded clips over as they are, `{"clips": [{"id", "text", "audio"}]}`
    plus `"words"` (true word times) and the language and task labels (`language`, `task`, `target_text`,
    `target_language`) where the shard carries them (eval and transcription take waves, not token
    batches); weight-0 padding clips are left out."""

    KEYS = ("id", "text", "audio", "words", "language", "task", "target_text", "target_language")

    def __call__(self, samples: list[dict]) -> dict:
        return {"clips": [{k: s[k] for k in self.KEYS if k in s} for s in samples if s.get("weight", 1.0) > 0]}
