"""speechlm's writer and reader of the model folder (the format: speechlm.model.folder).

    save_pretrained(model, dir)                       # a checkpoint's folder: what the run trained, bases by reference
    save_pretrained(model, dir, self_contained=True)  # the final folder: the bases' weights too (encoder/, decoder/)
    from_pretrained(dir)                              # either; bases by id (Hub, tiny/, offline/), hashes checked

Under ZeRO-3 every rank must call save_pretrained (parameters are gathered collectively); rank 0 writes.
The trained weights written are the optimizer's fp32 masters, not the bf16 copies the forward uses.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import re
from pathlib import Path

import torch
from peft import get_peft_model_state_dict
from safetensors.torch import save_file
from transformers import PretrainedConfig

from speechlm import text
from speechlm.config import ConfigError, ModelConfig, build
from speechlm.model import encoders, ids, parts
from speechlm.model.folder import layout
from speechlm.model.folder.files import AUTO_MAP, CUSTOM_PIPELINES, finish_folder
from speechlm.model.hfconfig import text_config


def _rank() -> int:
    return (
        torch.distributed.get_rank() if torch.distributed.is_available() and torch.distributed.is_initialized() else 0
    )


def _gathered(params):
    """Full parameters inside the block, also when ZeRO-3 has partitioned them (pitfall 1)."""
    params = [p for p in params if hasattr(p, "ds_id")]
    if not params:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(params, modifier_rank=None)


def _masters(module) -> dict:
    """Parameter name -> the optimizer's fp32 master, for the trainable parameters that have one.

    In DeepSpeed's bf16 mode the module holds bf16 copies of the trainables and the fp32 values live
    in the optimizer; an export of the bf16 copies would round away what the masters kept. Every rank
    calls this (under ZeRO-3 the masters are gathered collectively); outside an engine it is empty.
    """
    if not any(hasattr(p, "ds_id") or hasattr(p, "_hp_mapping") for p in module.parameters()):
        return {}
    from deepspeed.utils import safe_get_full_fp32_param

    out = {}
    for name, p in module.named_parameters():
        # `_hp_mapping` is None on a rank that holds no fragment of p, but p's gather is collective
        # (an all-reduce under ZeRO-1/2): every rank must call it for the same parameters, in order
        if p.requires_grad and (hasattr(p, "_z3_optimizer") or hasattr(p, "_hp_mapping")):
            full = safe_get_full_fp32_param(p)
            if full is not None:
                out[name] = full.detach().cpu().clone().contiguous()
    return out


def _state(module, keep=lambda name: True) -> dict:
    """The module's state for writing. Copied only where ZeRO-3 gathers it (the gather ends with the
    block); elsewhere the tensors themselves, so a tied weight stays one tensor (written once) and a
    2B-parameter base is not held twice in memory while its folder is written."""
    masters = _masters(module)
    partitioned = any(hasattr(p, "ds_id") for p in module.parameters())
    with _gathered(module.parameters()):
        state = {
            k: (v.detach().cpu().clone() if partitioned else v.detach().cpu()).contiguous()
            for k, v in module.state_dict().items()
            if keep(k)
        }
    return {k: masters.get(k, v) for k, v in state.items()}


# --------------------------------------------------------------------------- base references

_HASHES: dict[tuple, str] = {}


def _sha256(path: str) -> str:
    """layout.weights_sha256, once per process for unchanged files (a checkpoint save must not re-read GBs)."""
    stamp = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(Path(path).iterdir()))
    key = (str(Path(path).resolve()), stamp)
    if key not in _HASHES:
        _HASHES[key] = layout.weights_sha256(path)
    return _HASHES[key]


def declared_license(readme) -> str | None:
    """The `license:` a model card's YAML front matter declares (None: no card, or it says none)."""
    if readme is None or not Path(readme).is_file():
        return None
    text = Path(readme).read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---"):
        return None
    front = text[3:].split("\n---", 1)[0]
    m = re.search(r"^license:\s*(\S+)\s*$", front, re.MULTILINE)
    return m.group(1).strip("'\"") if m else None


def _card_of(model_id: str, local: str | None, revision: str | None) -> str | None:
    """The README.md of a base on this machine: in its folder, or in the Hub cache (never downloaded)."""
    if local is not None:
        return str(Path(local) / "README.md")
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(model_id, "README.md", revision=revision)
    return found if isinstance(found, str) else None


def base_ref(model_id: str, config) -> dict:
    """Where a base's weights come from, as a folder records it: never a path of this machine.

    - a Hub id: the id and the revision it loaded (`config._commit_hash`);
    - a speechlm id (`tiny/...`, `offline/...`): the id and the sha256 of the weights it resolves to;
    - a local folder: its name and the sha256 of its weights (a reader must be told where it is).
    With the `license` the base's own card declares, where it is on this machine (the model card
    derives the model's licence from its bases')."""
    if ids.is_speechlm_id(model_id):
        local = ids.resolve(model_id)
        ref = {"source": "speechlm", "id": model_id, "sha256": _sha256(local), "hub_id": ids.upstream(model_id)}
    elif Path(model_id).is_dir():
        local = model_id
        ref = {"source": "local", "id": Path(model_id).resolve().name, "sha256": _sha256(model_id)}
    else:
        local = None
        ref = {"source": "hub", "id": model_id, "revision": getattr(config, "_commit_hash", None)}
    licence = declared_license(_card_of(model_id, local, ref.get("revision")))
    return {**ref, "license": licence} if licence else ref


def resolve_base(ref: dict, part: str, where, given: str | None = None) -> str:
    """What `from_pretrained` loads for a recorded base: the folder's own sub-folder, a path the
    caller gives (`bases={part: path}`), a speechlm id's cache folder, or the Hub id. A hash that
    does not match is a ConfigError: those are not the weights the folder was trained on."""
    inside = layout.base_in_folder(where, ref)
    if inside is not None:
        return inside
    path = given
    if path is None and ref["source"] == "speechlm":
        path = ids.resolve(ref["id"])
    if path is None and ref["source"] == "local":
        raise ConfigError(
            f"{where}: its {part} is the local model '{ref['id']}' (sha256 {ref['sha256'][:12]}...), which this "
            f"machine may not have: pass its folder (`--base {part}=PATH` to transcribe, eval, export or serve; "
            f"from_pretrained(..., bases={{'{part}': PATH}})), or load the self-contained folder that "
            "`speechlm export` writes"
        )
    if path is None:
        return ref["id"]
    if ref.get("sha256") and _sha256(path) != ref["sha256"]:
        raise ConfigError(
            f"{where}: the {part} weights at '{path}' are not the ones this model was trained on ('{ref['id']}'; "
            f"sha256 {_sha256(path)[:12]}... against {ref['sha256'][:12]}... recorded)"
        )
    return str(path)


# --------------------------------------------------------------------------- writing


def _lora(model, merge: bool) -> dict | None:
    if not model.trainable.get("lora") or merge:
        return None
    lora = model.decoder.peft_config["default"].to_dict()
    lora.pop("base_model_name_or_path", None)
    lora["inference_mode"] = True
    return json.loads(
        json.dumps(lora, default=lambda o: getattr(o, "value", sorted(o) if isinstance(o, set) else str(o)))
    )


def _adapter_state(model) -> dict:
    masters = _masters(model.decoder)
    with _gathered([p for n, p in model.decoder.named_parameters() if "lora_" in n]):
        # peft names the adapter's tensors like the module's state dict, minus the adapter name
        state = {k: masters.get(k, v) for k, v in model.decoder.state_dict().items() if "lora_" in k}
        return {
            k: v.detach().cpu().clone()
            for k, v in get_peft_model_state_dict(model.decoder, state_dict=state, save_embedding_layers=False).items()
        }


def _decoder_state(model, merge: bool) -> tuple:
    """(the base decoder module to save, its full state dict under its own names)."""
    if merge and model.trainable.get("lora"):
        if any(hasattr(p, "ds_id") for p in model.decoder.parameters()):
            raise ValueError("merge_lora: merge a loaded model (speechlm export), not one inside a ZeRO-3 engine")
        merged = copy.deepcopy(model.decoder).merge_and_unload()
        return merged, {k: v.detach().cpu().contiguous() for k, v in merged.state_dict().items()}
    base = model._base_lm()
    state = _state(base, keep=lambda k: "lora_" not in k)
    state = {k.replace(".base_layer.", "."): v for k, v in state.items()}
    if getattr(text_config(base.config), "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)  # the input embeddings again: the folder's config re-ties them
    return base, state


def _scrub_config_file(path: Path, name: str) -> None:
    d = json.loads(path.read_text())
    if "_name_or_path" in d:
        d["_name_or_path"] = name
        path.write_text(json.dumps(d, indent=2, sort_keys=True) + "\n")


def _config_dict(config, name: str) -> dict:
    d = config.to_dict()
    d["_name_or_path"] = name  # the base's id, not the cache folder it was read from
    d.pop("_commit_hash", None)
    return d


def save_pretrained(model, path, *, self_contained: bool = False, merge_lora: bool = False, card: dict | None = None):
    """Write `model` as a model folder (speechlm.model.folder). A checkpoint's folder holds what the run
    trained and refers to its frozen bases; `self_contained` adds the bases' weights (encoder/, decoder/),
    and `merge_lora` (implies self-contained) merges the adapter into decoder/."""
    self_contained = self_contained or merge_lora
    t = model.trainable
    proj = _state(model.projector)
    adapter = _adapter_state(model) if t["lora"] and not merge_lora else None
    enc_state = _state(model.encoder) if (t["encoder"] or self_contained) else None
    dec_module, dec_state = _decoder_state(model, merge_lora) if (t["decoder"] or self_contained) else (None, None)
    embed = None
    if t["embed_tokens"] and dec_state is None:
        w = model._base_lm().get_input_embeddings().weight
        with _gathered([w]):
            embed = w.detach().cpu().clone()
    if _rank() != 0:
        return
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    base = model._base_lm()
    refs = copy.deepcopy(getattr(model, "bases", None)) or {
        "encoder": base_ref(model.cfg.audio_model_id, model.family.config),
        "decoder": base_ref(model.cfg.text_model_id, base.config),
    }
    weights = {"projector." + k: v for k, v in proj.items()}
    if embed is not None:
        weights["embed_tokens.weight"] = embed
    save_file(weights, out / layout.WEIGHTS, metadata={"format": "pt"})
    if adapter is not None:
        model.decoder.save_pretrained(out / layout.ADAPTER, state_dict=adapter, save_embedding_layers=False)
        _scrub_adapter_config(out / layout.ADAPTER / "adapter_config.json", refs["decoder"])
        # peft's card names the base by the path it was loaded from; the folder's README.md is the card
        (out / layout.ADAPTER / "README.md").unlink(missing_ok=True)
    if enc_state is not None:
        model.encoder.save_pretrained(out / "encoder", state_dict=enc_state)
        _scrub_config_file(out / "encoder" / "config.json", refs["encoder"]["id"])
        refs["encoder"]["folder"] = "encoder"
    if dec_state is not None:
        dec_module.save_pretrained(out / "decoder", state_dict=dec_state)
        _scrub_config_file(out / "decoder" / "config.json", refs["decoder"]["id"])
        model.tokenizer.save_pretrained(out / "decoder")  # a plain causal LM folder, usable on its own
        refs["decoder"]["folder"] = "decoder"
    model.tokenizer.save_pretrained(out)
    _write_config(model, out, refs, merge_lora)
    finish_folder(model, out, {**(card or {}), "bases": refs}, merged=merge_lora)
    return out


def write_export(model, out, merge_lora: bool = False, card: dict | None = None) -> Path:
    """The self-contained folder of `model`, what a run hands its user (every rank calls it under ZeRO-3;
    rank 0 writes): save_pretrained with the bases' weights inside; `merge_lora` merges the adapter."""
    return save_pretrained(model, out, self_contained=True, merge_lora=merge_lora, card=card)


def _scrub_adapter_config(path: Path, ref: dict) -> None:
    """peft's base_model_name_or_path: the Hub id where there is one, so that plain peft finds the base."""
    d = json.loads(path.read_text())
    d["base_model_name_or_path"] = ref.get("hub_id") or ref["id"]
    if ref.get("revision"):
        d["revision"] = ref["revision"]
    path.write_text(json.dumps(d, indent=2, sort_keys=True) + "\n")


def _write_config(model, out: Path, refs: dict, merged: bool) -> None:
    base = model._base_lm()
    settings = dataclasses.asdict(model.cfg)
    settings["audio_model_id"], settings["text_model_id"] = refs["encoder"]["id"], refs["decoder"]["id"]
    settings.pop("trust_remote_code", None)  # the reader decides, never the (possibly downloaded) folder
    settings.pop("init_from", None)  # where a run started: a path of this machine, and no setting of the model
    trainable = dict(model.trainable, lora=bool(model.trainable.get("lora")) and not merged)
    config = {
        "model_type": "speechlm",
        "format": layout.FORMAT,
        "architectures": ["SpeechLMForASR"],
        "auto_map": AUTO_MAP,
        "custom_pipelines": CUSTOM_PIPELINES,
        "dtype": str(base.get_input_embeddings().weight.dtype).removeprefix("torch."),
        "encoder_family": model.family.name,
        "encoder": _config_dict(model.family.config, refs["encoder"]["id"]),
        "decoder": _config_dict(text_config(base.config), refs["decoder"]["id"]),
        "bases": refs,
        "lora": _lora(model, merged),
        "speechlm": settings,
        "features": model.features.to_dict(),
        "projector_dtype": str(next(model.projector.parameters()).dtype).removeprefix("torch."),
        "bf16": model.bf16,
        "trainable": trainable,
        "calibration": model.calibration,
        "transformers_version": __import__("transformers").__version__,
    }
    (out / layout.CONFIG).write_text(json.dumps(config, indent=2) + "\n")


# --------------------------------------------------------------------------- reading


def from_pretrained(path, device=None, trust_remote_code: bool = False, bases: dict | None = None):
    """The SpeechLM in a model folder (a checkpoint's or a self-contained one), every part checked.
    `bases`: {"encoder"|"decoder": local folder} for bases recorded as local models."""
    path = Path(path)
    try:
        cfg = layout.read_config(path)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    bases = bases or {}
    mcfg = build(ModelConfig, cfg["speechlm"], prefix="model")
    mcfg.trust_remote_code = bool(trust_remote_code)  # the caller decides, never the folder itself
    dtype = parts.DTYPES[mcfg.model_dtype]
    enc_src = resolve_base(cfg["bases"]["encoder"], "encoder", path, bases.get("encoder"))
    dec_src = resolve_base(cfg["bases"]["decoder"], "decoder", path, bases.get("decoder"))
    family = encoders.family_for(enc_src, mcfg.trust_remote_code, features_settings=cfg["features"])
    if family.name != cfg["encoder_family"]:
        raise ConfigError(
            f"{path}: trained with a {cfg['encoder_family']} encoder, but {enc_src} is a {family.name} encoder"
        )
    encoder = parts.load_encoder(family, enc_src, dtype)
    decoder = parts.load_decoder(dec_src, dtype, parts.attn_implementation("auto"), mcfg.trust_remote_code)
    tokenizer = text.load_tokenizer(str(path), mcfg.audio_token, config=PretrainedConfig.from_dict(cfg))
    model = layout.assemble_folder_model(path, cfg, mcfg, encoder, decoder, tokenizer, family, None)
    # what a re-save records: the same bases (a base this folder carried is its origin again)
    model.bases = {k: {f: v for f, v in ref.items() if f != "folder"} for k, ref in cfg["bases"].items()}
    if device is not None:
        model.to(device)
    return model


def is_model_folder(path) -> bool:
    p = Path(path) / layout.CONFIG
    return p.is_file() and '"model_type": "speechlm"' in p.read_text()


__all__ = ["base_ref", "from_pretrained", "is_model_folder", "resolve_base", "save_pretrained", "write_export"]
