"""A self-contained, transformers-native export of a SpeechLM: loads without speechlm.

    from speechlm.export import write_export
    write_export(model, "out/hf")                       # model: a loaded speechlm SpeechLM
    write_export(model, "out/hf", merge_lora=True)      # LoRA merged into the decoder, plus decoder/ on its own

The folder holds `config.json` (auto_map -> AutoConfig/AutoModel, `custom_pipelines` ->
pipeline("automatic-speech-recognition")), `model.safetensors` (every weight: encoder, projector,
decoder, LoRA adapter), the tokenizer, `preprocessor_config.json` (the encoder family's feature
extractor, AutoFeatureExtractor), the modelling code (generated from speechlm's own modules:
speechlm.export.generate) and a model card (`README.md`). Then, with only torch, transformers and
peft installed:

    model = AutoModel.from_pretrained(folder, trust_remote_code=True); model.transcribe([wave])
    pipeline("automatic-speech-recognition", model=folder, trust_remote_code=True)("talk.flac")
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import torch

from speechlm.export.card import write_card
from speechlm.export.generate import write_remote_files

AUTO_MAP = {
    "AutoConfig": "configuration_speechlm.SpeechLMConfig",
    "AutoModel": "modeling_speechlm.SpeechLMForASR",
    "AutoFeatureExtractor": "feature_extraction_speechlm.SpeechLMFeatureExtractor",
}
CUSTOM_PIPELINES = {
    "automatic-speech-recognition": {
        "impl": "pipeline_speechlm.SpeechLMASRPipeline",
        "pt": ["AutoModel"],
        "tf": [],
        "type": "audio",
    }
}


def _jsonable(obj):
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_jsonable(v) for v in (sorted(obj) if isinstance(obj, set) else obj)]
    if hasattr(obj, "value") and not isinstance(obj, (int, float, str)):  # enums (peft's task type)
        return obj.value
    return obj


def _decoder(model, merge_lora: bool):
    """(decoder module to export, its LoRA config dict or None)."""
    dec = model.decoder
    if not hasattr(dec, "peft_config"):
        return dec, None
    if merge_lora:
        return copy.deepcopy(dec).merge_and_unload(), None
    lora = dec.peft_config["default"].to_dict()
    lora.pop("base_model_name_or_path", None)  # a local path of the machine it was trained on
    lora["inference_mode"] = True
    return dec, _jsonable(lora)


def _remote_class(out: Path, ref: str):
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    return get_class_from_dynamic_module(ref, str(out))


def write_export(model, out, merge_lora: bool = False, card: dict | None = None) -> Path:
    """Write `model` (a speechlm SpeechLM, full weights in memory) as a transformers remote-code folder."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_remote_files(out)
    decoder, lora = _decoder(model, merge_lora)
    base = decoder.get_base_model() if hasattr(decoder, "get_base_model") else decoder
    settings = dataclasses.asdict(model.cfg)
    config_cls = _remote_class(out, AUTO_MAP["AutoConfig"])
    config = config_cls(
        encoder_family=model.family.name,
        encoder=model.family.config.to_dict(),
        decoder=base.config.to_dict(),
        lora=lora,
        speechlm=settings,
        features=model.features.to_dict(),
        projector_dtype=str(next(model.projector.parameters()).dtype).removeprefix("torch."),
        bf16=model.bf16,
        architectures=["SpeechLMForASR"],
        auto_map={k: v for k, v in AUTO_MAP.items() if k != "AutoFeatureExtractor"},
        custom_pipelines=CUSTOM_PIPELINES,
        dtype=str(base.get_input_embeddings().weight.dtype).removeprefix("torch."),
    )
    model_cls = _remote_class(out, AUTO_MAP["AutoModel"])
    with torch.device("meta"):
        hf = model_cls(config, tokenizer=model.tokenizer)
    state = {"encoder." + k: v for k, v in model.encoder.state_dict().items()}
    state.update({"projector." + k: v for k, v in model.projector.state_dict().items()})
    state.update({"decoder." + k: v for k, v in decoder.state_dict().items()})
    missing, unexpected = hf.model.load_state_dict(state, strict=False, assign=True)
    if missing or unexpected:
        raise RuntimeError(f"export does not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
    hf.model.decoder.tie_weights() if hasattr(hf.model.decoder, "tie_weights") else None
    hf.save_pretrained(out, safe_serialization=True)
    model.tokenizer.save_pretrained(out)
    fe = {
        "feature_extractor_type": "SpeechLMFeatureExtractor",
        "encoder_family": model.family.name,
        "features": model.features.to_dict(),
        "sampling_rate": 16000,
        "auto_map": {"AutoFeatureExtractor": AUTO_MAP["AutoFeatureExtractor"]},
    }
    (out / "preprocessor_config.json").write_text(json.dumps(fe, indent=2) + "\n")
    if merge_lora:
        # a plain causal LM for serving engines: they take it with the projected audio as prompt embeddings
        base.save_pretrained(out / "decoder", safe_serialization=True)
        model.tokenizer.save_pretrained(out / "decoder")
    write_card(out, model, card or {}, merged=merge_lora)
    return out
