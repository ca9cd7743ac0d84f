"""Pretrained parts load exactly or not at all.

transformers loads a checkpoint that lacks some of a model's weights, initializes those at random
and only prints a report. For a frozen pretrained part that is a silently wrong model, so every
part goes through `load_pretrained`, which asks for the loading info and raises a ConfigError
naming the part and the first missing keys (exit 2).

Tied weights follow the checkpoint's own flag, wherever its config sets it. Qwen3.5 hub
checkpoints are multimodal (`Qwen3_5ForConditionalGeneration`: `model.language_model.*`,
`model.visual.*`, maybe `mtp.*`) with `tie_word_embeddings` at the top level only, while the
text decoder's `Qwen3_5TextConfig` defaults to untied: loaded as is, `lm_head.weight` would be
random. Here the text config takes the flag from the checkpoint's text config, else its top level.

Checkpoint weights the part does not use (a vision tower, an MTP head, a CTC head) are listed
once at info level: transformers drops some of them without a word.

`speechlm.model.parts.preflight` runs the same loads on the meta device (no weights read, no memory), so the trainer
refuses a bad checkpoint before it builds shards or touches a GPU. The planner goes one step further
(`meta_only(shapes=True)`): the same configs and tie flags, the model built from its config on the
meta device without opening a checkpoint, and the bundled real config (speechlm/model/configs/) where
the model is not local, so it plans the production default offline.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re

import torch
from transformers import AutoConfig, PretrainedConfig

from speechlm import text
from speechlm.config import ConfigError
from speechlm.model import hfconfig

log = logging.getLogger(__name__)

SHOW_KEYS = 5  # how many keys an error names
# prefixes under which checkpoints nest a part (the hub layouts): the same weight may sit at
# `model.language_model.layers.0...` in the checkpoint and `model.layers.0...` in the model
_WRAPPERS = re.compile(r"^(?:(?:model|language_model|encoder|base_model)\.)+")

SHAPES = "shapes"
_META = contextvars.ContextVar("speechlm_meta_load", default=False)


@contextlib.contextmanager
def meta_only(shapes: bool = False):
    """Inside this block `load_pretrained` builds on the meta device: all checks, no weights. With
    `shapes`, from the config alone: no checkpoint opened, the bundled config where none is local."""
    token = _META.set(SHAPES if shapes else True)
    try:
        yield
    finally:
        _META.reset(token)


# --------------------------------------------------------------------------- ties


def raw_config(path: str, trust_remote_code: bool = False, allow_bundled: bool = False) -> dict:
    """The checkpoint's config.json as written (what it sets, not the class defaults); with
    `allow_bundled`, local files only, else the bundled real config."""
    try:
        kw = {"local_files_only": True} if allow_bundled else {}
        d, _ = PretrainedConfig.get_config_dict(path, trust_remote_code=trust_remote_code, **kw)
    except (OSError, ValueError) as e:
        if not allow_bundled:
            raise ConfigError(f"can't read the config of '{path}': {e}") from None
        bundled = hfconfig.bundled_raw(path)
        if bundled is None:
            raise hfconfig.not_found(path, e) from None
        return bundled
    return d


def checkpoint_tie_flag(raw: dict, config, ckpt_keys: list[str] | None = None) -> bool | None:
    """`tie_word_embeddings` as the checkpoint sets it for `config`, which is either the checkpoint's
    own config or its text decoder's: wherever the checkpoint sets the flag (text section or top
    level). Where both set it and disagree, the checkpoint's tensors decide: tied if it stores no
    separate output head. None if the checkpoint never says, or `config` is another sub-config
    (e.g. an audio encoder's)."""
    key = "tie_word_embeddings"
    mtype = getattr(config, "model_type", None)
    if mtype == raw.get("model_type"):
        return bool(raw[key]) if key in raw else None
    sub = raw.get("text_config")
    if not (isinstance(sub, dict) and sub.get("model_type", mtype) == mtype):
        return None
    flags = {bool(d[key]) for d in (sub, raw) if key in d}
    if len(flags) == 1:
        return flags.pop()
    if not flags:
        return None
    if ckpt_keys is None:  # not safetensors: the text section, the more specific of the two
        return bool(sub[key])
    head = any(_norm(k).startswith("lm_head.") for k in ckpt_keys)
    log.info(
        "%s: the checkpoint's text config and top level disagree on tie_word_embeddings; it stores %s "
        "output head, so tie_word_embeddings=%s",
        mtype,
        "an" if head else "no",
        not head,
    )
    return not head


def follow_checkpoint_ties(config, raw: dict, ckpt_keys: list[str] | None = None):
    flag = checkpoint_tie_flag(raw, config, ckpt_keys)
    if flag is not None and hasattr(config, "tie_word_embeddings") and config.tie_word_embeddings != flag:
        log.debug("%s: tie_word_embeddings=%s as the checkpoint sets it", config.model_type, flag)
        config.tie_word_embeddings = flag
    return config


def _tie_targets(model) -> dict[str, str | None]:
    """Keys the model fills by tying (they need not be in the checkpoint) when its config ties,
    each with the key it is tied to (None where transformers lists only the target)."""
    out: dict[str, str | None] = {}
    for name, mod in model.named_modules():
        keys = getattr(mod, "_tied_weights_keys", None)
        cfg = getattr(mod, "config", None)
        if not keys or cfg is None or not getattr(cfg, "tie_word_embeddings", False):
            continue
        pairs = keys.items() if isinstance(keys, dict) else ((k, None) for k in keys)
        for target, source in pairs:
            out[f"{name}.{target}" if name else target] = (f"{name}.{source}" if name else source) if source else None
    return out


def _untied(model, ties: dict[str, str | None], keys) -> list[str]:
    """Of the tie targets in `keys`, those that do not share storage with their source after loading."""
    if any(p.is_meta for p in model.parameters()):
        return []
    params = dict(model.named_parameters(remove_duplicate=False))
    bad = []
    for k in keys:
        src = ties.get(k)
        if src and k in params and src in params and params[k].data_ptr() != params[src].data_ptr():
            bad.append(k)
    return bad


# --------------------------------------------------------------------------- checkpoint keys


def checkpoint_keys(path: str, local_only: bool = False) -> list[str] | None:
    """Tensor names in a safetensors checkpoint (local dir or the Hub cache); None if not safetensors
    (or, with `local_only`, not on this machine: nothing is downloaded)."""
    from transformers.utils import cached_file

    def find(name):
        try:
            return cached_file(
                path,
                name,
                local_files_only=local_only,
                _raise_exceptions_for_missing_entries=False,
                _raise_exceptions_for_connection_errors=False,
            )
        except OSError:
            return None

    index = find("model.safetensors.index.json")
    if index:
        with open(index) as f:
            return sorted(json.load(f)["weight_map"])
    single = find("model.safetensors")
    if not single:
        return None
    from safetensors import safe_open

    with safe_open(single, "pt") as fh:
        return sorted(fh.keys())


def _norm(key: str) -> str:
    return _WRAPPERS.sub("", key)


def unused_keys(model, ckpt_keys: list[str]) -> list[str]:
    """Checkpoint tensors that no weight of `model` comes from."""
    mine = {_norm(k) for k in model.state_dict()}
    return [k for k in ckpt_keys if _norm(k) not in mine]


def _groups(keys: list[str]) -> str:
    """`model.visual.* (24), mtp.* (15)`: unused keys summed by their part."""
    counts: dict[str, int] = {}
    for k in keys:
        parts = k.split(".")
        # the first component that is not a wrapper names the part (visual, mtp, ctc_head)
        i = 0
        while i < len(parts) - 1 and parts[i] in ("model", "language_model", "encoder", "base_model"):
            i += 1
        head = ".".join(parts[: i + 1])
        counts[head] = counts.get(head, 0) + 1
    return ", ".join(f"{h}.* ({n})" for h, n in sorted(counts.items()))


# --------------------------------------------------------------------------- loading


def _first(keys) -> str:
    keys = sorted(keys)
    more = f" and {len(keys) - SHOW_KEYS} more" if len(keys) > SHOW_KEYS else ""
    return ", ".join(keys[:SHOW_KEYS]) + more


def check_loading_info(model, info: dict, part: str, path: str) -> None:
    """Raise if any weight of `model` did not come from the checkpoint (ties the config asks for aside)."""
    ties = _tie_targets(model)
    reported = set(info.get("missing_keys") or ())
    missing = (reported - set(ties)) | set(_untied(model, ties, reported & set(ties)))
    if missing:
        raise ConfigError(
            f"{part} '{path}': {len(missing)} weight(s) missing from the checkpoint would be randomly "
            f"initialized: {_first(missing)} (wrong checkpoint, or a damaged/partial download)"
        )
    mismatched = info.get("mismatched_keys") or ()
    if mismatched:
        shown = _first(str(m[0]) if isinstance(m, (tuple, list)) else str(m) for m in mismatched)
        raise ConfigError(f"{part} '{path}': weight shapes don't match the model's config: {shown}")
    if info.get("error_msgs"):
        raise ConfigError(f"{part} '{path}': loading failed: {info['error_msgs'][0]}")


def load_pretrained(cls, path: str, part: str, **kwargs):
    """`cls.from_pretrained(path, **kwargs)` that fails loudly instead of initializing weights.

    `part` names the part in messages (`encoder`, `decoder`). The decoder part loads the
    checkpoint's text decoder: its text config, with the checkpoint's tie flag. Inside
    `meta_only()` the model is built on the meta device and only checked; inside
    `meta_only(shapes=True)` it is built from its config (`build_from_config`)."""
    trust = kwargs.get("trust_remote_code", False)
    shapes = _META.get() == SHAPES
    raw = raw_config(path, trust, allow_bundled=shapes)
    config = kwargs.pop("config", None)
    if config is None:
        if shapes:
            config = hfconfig.load_config(path, trust, allow_bundled=True)
        else:
            config = AutoConfig.from_pretrained(path, trust_remote_code=trust)
        if part == "decoder" and hasattr(config, "get_text_config"):
            config = config.get_text_config(decoder=True)
    keys = checkpoint_keys(path, local_only=shapes)
    config = follow_checkpoint_ties(config, raw, keys)
    if shapes:
        return build_from_config(cls, config, **kwargs)
    if _META.get():
        kwargs["device_map"] = "meta"
    try:
        model, info = cls.from_pretrained(path, config=config, output_loading_info=True, **kwargs)
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"{part} '{path}': can't load: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        ) from None
    check_loading_info(model, info, part, path)
    if keys is not None:
        unused = unused_keys(model, keys)
        if unused and not _META.get():  # once: the real load, not the preflight
            log.info("%s '%s': %d checkpoint tensors not used: %s", part, path, len(unused), _groups(unused))
    return model


def build_from_config(cls, config, *, dtype=None, attn_implementation=None, trust_remote_code=False, **loading):
    """The model `cls.from_pretrained` would build for `config`, on the meta device, no checkpoint
    read. `loading` (a family's key mapping and the like) only steers reading weights: nothing to read."""
    kw = {"dtype": dtype} if dtype is not None else {}
    if attn_implementation is not None:
        kw["attn_implementation"] = attn_implementation
    with torch.device("meta"):
        if hasattr(cls, "from_config"):  # an Auto class: it picks the model class for the config
            return cls.from_config(config, trust_remote_code=trust_remote_code, **kw)
        return cls._from_config(config, **kw)


# --------------------------------------------------------------------------- tokenizer


def check_tokenizer(tok, decoder, model_id: str, audio_token: str = "<audio>") -> None:
    """The tokenizer must belong to the decoder: every id it can produce has an embedding row
    (the audio token aside: it has none, SpeechLM.embed puts the projected audio in its places), and it
    has the ChatML end of turn."""
    rows = decoder.get_input_embeddings().num_embeddings
    audio = tok.convert_tokens_to_ids(audio_token)
    beyond = [i for i in range(rows, len(tok)) if i != audio]
    if beyond:
        raise ConfigError(
            f"tokenizer of '{model_id}': {len(tok)} tokens but the decoder's embedding has {rows} rows "
            f"(ids {beyond[0]}..{beyond[-1]} would index nothing): tokenizer and model don't belong together"
        )
    try:
        text.end_of_turn_id(tok)
    except ValueError as e:
        raise ConfigError(f"tokenizer of '{model_id}': {e}") from None


def load_tokenizer(model_id: str, audio_token: str = "<audio>", trust_remote_code: bool = False):
    """text.load_tokenizer with its failures as ConfigErrors naming the tokenizer."""
    try:
        return text.load_tokenizer(model_id, audio_token, trust_remote_code)
    except (OSError, ValueError, TypeError) as e:
        raise ConfigError(
            f"tokenizer of '{model_id}': can't load: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        ) from None
