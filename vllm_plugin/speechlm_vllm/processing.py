"""vLLM's multimodal processing for a speechlm folder: audio in, features out, and each clip's one
`<audio>` placeholder in the prompt replaced by the family's `audio_token_count` placeholders.

The features are the folder family's own extractor, run per clip (a clip's features do not depend on
its batch mates), and the count is the family's own arithmetic, so the two cannot drift: the model
checks that the projector emits exactly that many embeddings per clip (model.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from transformers import BatchFeature
from vllm.multimodal.inputs import MultiModalFieldConfig
from vllm.multimodal.parse import MultiModalDataParser
from vllm.multimodal.processing import (
    BaseDummyInputsBuilder,
    BaseMultiModalProcessor,
    BaseProcessingInfo,
    PromptReplacement,
)

from .folder import SAMPLE_RATE, load

DUMMY_SECONDS = 30  # the profiling clip of a family without a length limit


class SpeechLMProcessingInfo(BaseProcessingInfo):
    @property
    def folder(self):
        return load(self.ctx.model_config.model)

    def get_data_parser(self) -> MultiModalDataParser:
        return MultiModalDataParser(
            target_sr=SAMPLE_RATE,
            target_channels=1,
            expected_hidden_size=self._get_expected_hidden_size(),
            allow_missing_mm_embeddings=self.allow_missing_mm_embeddings,
        )

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"audio": 1}  # one clip per prompt, as speechlm trains and transcribes

    def max_clip_samples(self) -> int:
        return self.folder.max_samples or DUMMY_SECONDS * SAMPLE_RATE


class SpeechLMDummyInputs(BaseDummyInputsBuilder[SpeechLMProcessingInfo]):
    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        return self.info.folder.settings.audio_token * mm_counts.get("audio", 0)

    def get_dummy_mm_data(self, seq_len: int, mm_counts: Mapping[str, int], mm_options):
        n = mm_counts.get("audio", 0)
        audios = self._get_dummy_audios(
            length=self.info.max_clip_samples(), num_audios=n, overrides=mm_options.get("audio") if mm_options else None
        )
        return {"audio": audios}


class SpeechLMProcessor(BaseMultiModalProcessor[SpeechLMProcessingInfo]):
    def _call_hf_processor(self, hf_data: Mapping[str, object], hf_kwargs: Mapping[str, object]) -> BatchFeature:
        """The folder family's features of each clip, and its length in samples."""
        folder = self.info.folder
        waves = [np.asarray(a, dtype=np.float32) for a in hf_data.get("audio", [])]
        feats = []
        for w in waves:
            f, mask = folder.family.features([w])
            feats.append(f[0, : int(mask[0].sum())])
        return BatchFeature(
            {"input_features": feats, "audio_samples": torch.tensor([len(w) for w in waves], dtype=torch.long)}
        )

    def _get_mm_fields_config(self, hf_inputs, hf_processor_mm_kwargs) -> Mapping[str, MultiModalFieldConfig]:
        return {
            "input_features": MultiModalFieldConfig.batched("audio"),
            "audio_samples": MultiModalFieldConfig.batched("audio", keep_on_cpu=True),
        }

    def _get_prompt_updates(self, mm_items, hf_processor_mm_kwargs, out_mm_kwargs) -> Sequence[PromptReplacement]:
        folder = self.info.folder
        audio_id = folder.audio_token_id
        samples = out_mm_kwargs.get_data().get("audio_samples")

        def placeholders(i: int) -> list[int]:
            return [audio_id] * folder.audio_tokens(int(samples[i]))

        return [PromptReplacement(modality="audio", target=[audio_id], replacement=placeholders)]
