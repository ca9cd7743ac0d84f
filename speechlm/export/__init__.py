"""The self-contained model folder: what a run hands its user, loadable without speechlm.

    from speechlm.export import write_export
    write_export(model, "out/final")                    # model: a loaded speechlm SpeechLM
    write_export(model, "out/merged", merge_lora=True)  # LoRA merged into decoder/, a plain causal LM

Every folder speechlm writes (a checkpoint's too) has one format (speechlm.model.folder) and loads with
transformers alone (`trust_remote_code=True`): a checkpoint's folder fetches its frozen bases by Hub id,
as peft does; this one carries them (encoder/, decoder/), so it also loads where the bases came from a
local folder or speechlm's offline conversions. With only torch, transformers and peft installed:

    model = AutoModel.from_pretrained(folder, trust_remote_code=True); model.transcribe([wave])
    pipeline("automatic-speech-recognition", model=folder, trust_remote_code=True)("talk.flac")

The code files are generated from speechlm's own modules (speechlm.export.generate), the card by
speechlm.export.card, the rest by speechlm.export.files.
"""

from __future__ import annotations

from pathlib import Path

from speechlm.export.files import AUTO_MAP, CUSTOM_PIPELINES, finish_folder


def write_export(model, out, merge_lora: bool = False, card: dict | None = None) -> Path:
    """The self-contained folder of `model` (every rank calls it under ZeRO-3; rank 0 writes)."""
    from speechlm.model.io import save_pretrained  # the writer imports this package's files: import it late

    return save_pretrained(model, out, self_contained=True, merge_lora=merge_lora, card=card)


__all__ = ["AUTO_MAP", "CUSTOM_PIPELINES", "finish_folder", "write_export"]
