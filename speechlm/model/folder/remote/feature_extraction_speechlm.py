"""The encoder family's feature extractor as a transformers feature extractor (AutoFeatureExtractor)."""

from __future__ import annotations

import numpy as np
from transformers import BatchFeature, FeatureExtractionMixin

from .speechlm_audio_checks import SAMPLE_RATE
from .speechlm_core import FAMILIES


class SpeechLMFeatureExtractor(FeatureExtractionMixin):
    """16 kHz mono clips -> `input_features` [B, T, F] and `feature_mask` [B, T], computed by the
    family's own extractor (speechlm_core.py), with the settings the model was trained with."""

    model_input_names = ["input_features", "feature_mask"]

    def __init__(
        self, encoder_family: str = "", features: dict | None = None, sampling_rate: int = SAMPLE_RATE, **kwargs
    ):
        super().__init__(**kwargs)
        self.encoder_family = encoder_family
        self.features = dict(features or {})
        self.sampling_rate = sampling_rate
        # a family makes its extractor from saved settings without needing its encoder config
        self._extract = FAMILIES[encoder_family].make_features(None, self.features)

    def to_dict(self):
        out = super().to_dict()
        out.pop("_extract", None)
        return out

    def __call__(self, raw_speech, sampling_rate: int | None = None, return_tensors: str = "pt", **kwargs):
        if sampling_rate is not None and sampling_rate != self.sampling_rate:
            raise ValueError(f"expected {self.sampling_rate} Hz audio, got {sampling_rate} Hz: resample first")
        waves = [raw_speech] if isinstance(raw_speech, np.ndarray) and raw_speech.ndim == 1 else list(raw_speech)
        feats, mask = self._extract([np.asarray(w, dtype=np.float32) for w in waves])
        return BatchFeature({"input_features": feats, "feature_mask": mask}, tensor_type=return_tensors)
