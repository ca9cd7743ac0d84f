"""speechlm.model: audio encoder (a family in speechlm.model.encoders) -> projector -> LoRA decoder (see docs/design.md)."""
from speechlm.model.build import build_model, calibrate, trainable_parts
from speechlm.model.speechlm import Output, SpeechLM

__all__ = ["build_model", "calibrate", "trainable_parts", "Output", "SpeechLM"]
