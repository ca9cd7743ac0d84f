"""speechlm.model: audio encoder (a family in speechlm.model.encoders) -> projector -> LoRA decoder (see docs/design.md).

Layers, each importing only those before it: the modelling layer (speechlm.py, projector.py,
loss.py, encoders/base.py and each family's file: torch, transformers, peft and each other), then
the builders (ids.py resolves model ids, hfconfig.py, loading.py, parts.py, build.py), then the
model folder (folder/: its format, writer, reader and the code it carries). longform/ is numpy
only, so the package's names below load torch on first use, not on import: `speechlm.model.longform`
(which the CLIs import before parsing) stays light."""  # noqa: E501

# name -> module that defines it, imported on first use (see above)
_NAMES = {
    "build_model": "speechlm.model.build",
    "calibrate": "speechlm.model.build",
    "trainable_parts": "speechlm.model.build",
    "from_pretrained": "speechlm.model.folder.io",
    "save_pretrained": "speechlm.model.folder.io",
    "Output": "speechlm.model.speechlm",
    "SpeechLM": "speechlm.model.speechlm",
}


def __getattr__(name: str):
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_NAMES[name]), name)


__all__ = ["build_model", "calibrate", "from_pretrained", "save_pretrained", "trainable_parts", "Output", "SpeechLM"]
