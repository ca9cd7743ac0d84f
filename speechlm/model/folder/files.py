"""The transformers side of a model folder: its code, its feature extractor's config and its card.

`speechlm.model.folder.io.save_pretrained` writes the weights and config.json, then calls `finish_folder`, so
every folder (a checkpoint's and a self-contained one) loads with `AutoModel` / `pipeline` and
`trust_remote_code=True`.
"""

from __future__ import annotations

import json
from pathlib import Path

from speechlm.audio_checks import SAMPLE_RATE
from speechlm.model.folder.card import write_card
from speechlm.model.folder.generate import write_remote_files

AUTO_MAP = {
    "AutoConfig": "configuration_speechlm.SpeechLMConfig",
    "AutoModel": "modeling_speechlm.SpeechLMForASR",
}
FEATURE_EXTRACTOR = "feature_extraction_speechlm.SpeechLMFeatureExtractor"
CUSTOM_PIPELINES = {
    "automatic-speech-recognition": {
        "impl": "pipeline_speechlm.SpeechLMASRPipeline",
        "pt": ["AutoModel"],
        "tf": [],
        "type": "audio",
    }
}


def finish_folder(model, out, card: dict, merged: bool = False) -> Path:
    out = Path(out)
    write_remote_files(out)
    fe = {
        "feature_extractor_type": "SpeechLMFeatureExtractor",
        "encoder_family": model.family.name,
        "features": model.features.to_dict(),
        "sampling_rate": SAMPLE_RATE,
        "auto_map": {"AutoFeatureExtractor": FEATURE_EXTRACTOR},
    }
    (out / "preprocessor_config.json").write_text(json.dumps(fe, indent=2) + "\n")
    write_card(out, model, card, merged=merged)
    return out
