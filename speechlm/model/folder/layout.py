"""The model folder: one format for every checkpoint and final model, and the one code that reads it.

A folder is a transformers remote-code model (`config.json` with `model_type: speechlm` and `auto_map`):

  config.json             the encoder's and decoder's configs, the speechlm settings, the feature settings,
                          `bases` (where the encoder's and decoder's weights come from), `trainable`,
                          `calibration`, the LoRA config (or null)
  model.safetensors       the trained weights speechlm adds: `projector.*` (and `embed_tokens.weight` when
                          the embeddings trained without the rest of the decoder)
  adapter/                the LoRA adapter, a plain peft adapter of the unmodified base decoder
  encoder/, decoder/      full HF model folders, only when the run trained them or the folder is
                          self-contained (`speechlm export`, the end of a run): then `bases` points at them
  tokenizer files, preprocessor_config.json, README.md (the model card), the modelling code (*.py)

A base reference (`bases.encoder`, `bases.decoder`) is `{"id", "revision", "sha256", "folder"}`: `folder`
names a sub-folder of this folder that holds the weights; else `id` is a Hub id (at `revision`), or a
speechlm id (`tiny/...`, `offline/...`) or the name of a local model, with the `sha256` of its weight files.
No path of the machine that wrote the folder is ever recorded.

This module is modelling layer: it is carried into an exported folder (speechlm.model.folder.generate), so
speechlm and transformers' `AutoModel` read a folder with this same code; each brings only its own way
of fetching a base (speechlm: its ids and cache, with hashes checked; transformers: the Hub).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from safetensors.torch import load_file

from ..projector import Projector
from ..speechlm import DTYPES, SpeechLM

FORMAT = 2
CONFIG = "config.json"
WEIGHTS = "model.safetensors"
ADAPTER = "adapter"


def read_config(folder) -> dict:
    """config.json of a speechlm model folder (ValueError naming the folder when it is not one)."""
    path = Path(folder) / CONFIG
    if not path.is_file():
        older = (Path(folder) / "speechlm.json").is_file()
        why = " (it was written by an older speechlm, format 1: train or export it again)" if older else ""
        raise ValueError(f"{folder} is not a speechlm model folder: no {CONFIG}{why}")
    cfg = json.loads(path.read_text())
    if cfg.get("model_type") != "speechlm" or "bases" not in cfg:
        raise ValueError(f"{path}: not a speechlm model config (model_type {cfg.get('model_type')!r}, format 2)")
    return cfg


def weights_sha256(folder) -> str:
    """Content hash of a model folder's weights (its *.safetensors and *.bin files, by name and bytes)."""
    h = hashlib.sha256()
    files = sorted(p for p in Path(folder).iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file())
    if not files:
        raise ValueError(f"{folder}: no weight files (*.safetensors, *.bin) to hash")
    for p in files:
        h.update(p.name.encode() + b"\0")
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                h.update(block)
    return h.hexdigest()


def base_in_folder(folder, ref: dict) -> str | None:
    """The sub-folder holding a base's weights, when this folder carries them."""
    return str(Path(folder) / ref["folder"]) if ref.get("folder") else None


def assemble_speechlm(
    settings,
    encoder,
    decoder,
    tokenizer,
    family,
    trainable: dict,
    *,
    bf16: bool,
    loss,
    projector_dtype: str,
    ctc_weight: float = 0.0,
    lora=None,
    adapter=None,
) -> SpeechLM:
    """The one assembly of a SpeechLM from its loaded parts, for a run and for a folder alike: every base
    parameter frozen but what `trainable` trains; LoRA on the decoder, fresh (`lora`: a peft LoraConfig)
    or a saved adapter (`adapter`: its folder, frozen); a fresh projector in `projector_dtype`; `ctc_weight`
    for training. `settings` is the speechlm model settings object (speechlm.config.ModelConfig, or
    config.json's as attributes)."""
    for p in list(encoder.parameters()) + list(decoder.parameters()):
        p.requires_grad_(False)
    if trainable.get("encoder"):
        encoder.requires_grad_(True)
    if trainable.get("decoder"):
        decoder.requires_grad_(True)
    if trainable.get("embed_tokens"):
        decoder.get_input_embeddings().weight.requires_grad_(True)
    elif trainable.get("decoder"):
        decoder.get_input_embeddings().weight.requires_grad_(False)
    # peft keeps the adapter in fp32 beside a bf16 base (autocast_adapter_dtype), in training and after
    if adapter is not None:
        from peft import PeftModel

        decoder = PeftModel.from_pretrained(decoder, str(adapter), is_trainable=False)
    elif lora is not None:
        from peft import get_peft_model

        decoder = get_peft_model(decoder, lora, autocast_adapter_dtype=True)
        if trainable.get("embed_tokens"):
            decoder.get_base_model().get_input_embeddings().weight.requires_grad_(True)
    hidden = decoder.config.get_text_config().hidden_size
    projector = Projector(family.hidden_size, hidden, settings.projector_hidden_dim, settings.projector_pool_stride)
    projector = projector.to(DTYPES[projector_dtype])
    projector.requires_grad_(bool(trainable.get("projector")))
    return SpeechLM(
        settings, encoder, projector, decoder, tokenizer, family, trainable, bf16=bf16, loss=loss, ctc_weight=ctc_weight
    )


def assemble_folder_model(folder, config: dict, settings, encoder, decoder, tokenizer, family, loss) -> SpeechLM:
    """The SpeechLM a folder describes, from its loaded bases (assemble_speechlm): the adapter, the
    projector and the other trained weights put on; every parameter frozen; inference mode."""
    folder = Path(folder)
    if config.get("lora") and not (folder / ADAPTER).is_dir():
        raise ValueError(f"{folder}: config.json has a LoRA config but there is no {ADAPTER}/ folder")
    adapter = folder / ADAPTER if config.get("lora") else None
    weights = load_file(str(folder / WEIGHTS))
    model = assemble_speechlm(
        settings,
        encoder,
        decoder,
        tokenizer,
        family,
        {},
        bf16=config["bf16"],
        loss=loss,
        projector_dtype=config.get("projector_dtype", "float32"),
        adapter=adapter,
    )
    model.projector.load_state_dict(
        {k.removeprefix("projector."): v for k, v in weights.items() if k.startswith("projector.")}
    )
    if "embed_tokens.weight" in weights:
        model._base_lm().get_input_embeddings().weight.data.copy_(weights["embed_tokens.weight"])
    model.trainable = dict(config["trainable"])  # what this folder adds to its bases: a re-save writes the same
    model.calibration = config.get("calibration")
    return model.eval()
