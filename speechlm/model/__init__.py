"""speechlm.model: audio encoder (a family in speechlm.model.encoders) -> projector -> LoRA decoder (see docs/design.md).

Layers, each importing only those before it: the modelling layer (speechlm.py, projector.py,
loss.py, encoders/base.py and each family's file: torch, transformers, peft and each other), then
the builders (ids.py resolves model ids, hfconfig.py, loading.py, parts.py, build.py), then state
I/O (io.py)."""  # noqa: E501

from speechlm.model.build import build_model, calibrate, trainable_parts
from speechlm.model.io import from_pretrained, save_pretrained
from speechlm.model.speechlm import Output, SpeechLM

__all__ = ["build_model", "calibrate", "from_pretrained", "save_pretrained", "trainable_parts", "Output", "SpeechLM"]
