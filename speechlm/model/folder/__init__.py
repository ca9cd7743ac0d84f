"""The model folder: the one format every checkpoint and final model has, and all the code of it.

    from speechlm.model.folder import save_pretrained, from_pretrained, write_export
    save_pretrained(model, dir)        # a checkpoint's folder: what the run trained, bases by reference
    write_export(model, "out/final")   # the self-contained folder: the bases inside (merge_lora=True: merged)
    from_pretrained(dir)               # either; bases by id (Hub, tiny/, offline/), hashes checked

Every folder loads with transformers alone (`trust_remote_code=True`); a self-contained one also
where the bases came from a local folder or speechlm's offline conversions:

    model = AutoModel.from_pretrained(folder, trust_remote_code=True); model.transcribe([wave])
    pipeline("automatic-speech-recognition", model=folder, trust_remote_code=True)("talk.flac")

layout.py: the format and the code that reads it, which travels inside every folder; io.py: speechlm's
writer and reader; files.py: the transformers side (code, feature extractor config, card);
generate.py: the code files, generated from speechlm's own modules (with speechlm.model.longform's);
card.py: the model card; remote/: the hand-written adapters to transformers' Auto classes and pipeline.
"""

from speechlm.model.folder.io import base_ref, from_pretrained, is_model_folder, save_pretrained, write_export
from speechlm.model.folder.layout import (
    ADAPTER,
    CONFIG,
    FORMAT,
    WEIGHTS,
    assemble_folder_model,
    base_in_folder,
    read_config,
    weights_sha256,
)

__all__ = [
    "ADAPTER",
    "CONFIG",
    "FORMAT",
    "WEIGHTS",
    "assemble_folder_model",
    "base_in_folder",
    "base_ref",
    "from_pretrained",
    "is_model_folder",
    "read_config",
    "save_pretrained",
    "weights_sha256",
    "write_export",
]
