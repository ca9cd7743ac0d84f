"""CTranslate2 Whisper (`model.bin`, WhisperSpec) -> a plain HF `WhisperForConditionalGeneration` folder.

model.bin (binary version 6): a header, named tensors, then aliases. The layout differs from HF's in
three ways this mapping undoes: self-attention q/k/v are fused in `self_attention/linear_0` (HF's
k_proj has no bias: its slice of the fused bias is zero), cross-attention k/v are fused in
`attention/linear_1`, and `decoder/projection/weight` is an alias of the token embeddings (tied).

The special token ids differ between the English-only and the multilingual vocabularies
(`<|endoftext|>` 50256 or 50257), so they are read from the tokenizer, never assumed. A
multilingual checkpoint gets the generation config that `generate(language=..., task=...)` and
language detection read (`lang_to_id`, `task_to_id`); both get the alignment heads of CTranslate2's
config.json (cross-attention heads for word timestamps).
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import torch

# CTranslate2's DataType enum
_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
BINARY_VERSION = 6
TASKS = ("transcribe", "translate")
# openai-whisper's rule: the multilingual vocabularies have 51,865 tokens (51,866 for large-v3),
# the English-only ones 51,864 (whose CTranslate2 config.json still lists the multilingual lang_ids)
MULTILINGUAL_VOCAB = 51865


def read_ct2(path: Path) -> tuple[str, dict[str, np.ndarray], dict[str, str]]:
    """(spec name, name -> array, alias -> name) of a CTranslate2 model.bin."""
    buf = Path(path).read_bytes()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("H")
        s = buf[pos : pos + n].rstrip(b"\0").decode()
        pos += n
        return s

    version = take("I")
    if version != BINARY_VERSION:
        raise ValueError(f"{path}: CTranslate2 binary version {version}, this reader knows {BINARY_VERSION}")
    spec = string()
    take("I")  # spec revision
    tensors = {}
    for _ in range(take("I")):
        name = string()
        dims = [take("I") for _ in range(take("B"))]
        dtype = take("B")
        nbytes = take("I")
        if dtype not in _DTYPES:
            raise ValueError(f"{path}: tensor {name} has CTranslate2 dtype {dtype}, not supported")
        tensors[name] = np.frombuffer(
            buf, dtype=_DTYPES[dtype], count=nbytes // np.dtype(_DTYPES[dtype]).itemsize, offset=pos
        ).reshape(dims)
        pos += nbytes
    aliases = {string(): string() for _ in range(take("I"))}
    return spec, tensors, aliases


def _layers(t: dict, side: str) -> list[int]:
    return sorted({int(m.group(1)) for k in t if (m := re.match(rf"{side}/layer_(\d+)/", k))})


def _scalar(t: dict, name: str) -> int:
    return int(t[name].reshape(-1)[0])


def state_dict(t: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """HF WhisperForConditionalGeneration keys from CTranslate2 WhisperSpec tensors."""
    sd: dict[str, torch.Tensor] = {}

    def put(hf: str, ct: str):
        sd[hf] = torch.from_numpy(np.array(t[ct], dtype=np.float32))

    def norm(hf: str, ct: str):
        put(hf + ".weight", ct + "/gamma")
        put(hf + ".bias", ct + "/beta")

    def linear(hf: str, ct: str):
        put(hf + ".weight", ct + "/weight")
        put(hf + ".bias", ct + "/bias")

    def split_linear(hf_names: list[str], ct: str):
        w, b = t[ct + "/weight"], t[ct + "/bias"]
        n = len(hf_names)
        for i, hf in enumerate(hf_names):
            rows = slice(i * w.shape[0] // n, (i + 1) * w.shape[0] // n)
            sd[hf + ".weight"] = torch.from_numpy(np.array(w[rows], dtype=np.float32))
            if not hf.endswith("k_proj"):  # HF's k projections have no bias (CTranslate2 stores zeros)
                sd[hf + ".bias"] = torch.from_numpy(np.array(b[rows], dtype=np.float32))

    for side in ("encoder", "decoder"):
        layers = _layers(t, side)
        for i in layers:
            ct, hf = f"{side}/layer_{i}", f"model.{side}.layers.{i}"
            norm(f"{hf}.self_attn_layer_norm", f"{ct}/self_attention/layer_norm")
            split_linear(
                [f"{hf}.self_attn.q_proj", f"{hf}.self_attn.k_proj", f"{hf}.self_attn.v_proj"],
                f"{ct}/self_attention/linear_0",
            )
            linear(f"{hf}.self_attn.out_proj", f"{ct}/self_attention/linear_1")
            if side == "decoder":
                norm(f"{hf}.encoder_attn_layer_norm", f"{ct}/attention/layer_norm")
                linear(f"{hf}.encoder_attn.q_proj", f"{ct}/attention/linear_0")
                split_linear([f"{hf}.encoder_attn.k_proj", f"{hf}.encoder_attn.v_proj"], f"{ct}/attention/linear_1")
                linear(f"{hf}.encoder_attn.out_proj", f"{ct}/attention/linear_2")
            norm(f"{hf}.final_layer_norm", f"{ct}/ffn/layer_norm")
            linear(f"{hf}.fc1", f"{ct}/ffn/linear_0")
            linear(f"{hf}.fc2", f"{ct}/ffn/linear_1")
        norm(f"model.{side}.layer_norm", f"{side}/layer_norm")
        put(f"model.{side}.embed_positions.weight", f"{side}/position_encodings/encodings")
    for conv in ("conv1", "conv2"):
        linear(f"model.encoder.{conv}", f"encoder/{conv}")
    put("model.decoder.embed_tokens.weight", "decoder/embeddings/weight")
    return sd


def convert(src: Path, out: Path) -> None:
    """src: the CTranslate2 folder (model.bin, config.json, tokenizer.json) -> out: an HF folder."""
    src = Path(src)
    spec, t, aliases = read_ct2(src / "model.bin")
    if spec != "WhisperSpec":
        raise ValueError(f"{src}/model.bin holds a {spec}, not a WhisperSpec")
    if aliases.get("decoder/projection/weight", "decoder/embeddings/weight") != "decoder/embeddings/weight":
        raise ValueError("decoder/projection/weight is not tied to the embeddings; this converter assumes it is")
    ct_cfg = json.loads((src / "config.json").read_text())
    special = special_tokens(src / "tokenizer.json")
    cfg = _whisper_config(t, ct_cfg, special)
    _save_model(t, cfg, out)
    _save_processor(src / "tokenizer.json", cfg, out)
    _generation_config(cfg, ct_cfg, special).save_pretrained(out)


def special_tokens(tokenizer_file: Path) -> dict[str, int]:
    """'<|endoftext|>', '<|en|>', '<|transcribe|>', ... -> id: the added tokens of a tokenizer.json."""
    added = json.loads(Path(tokenizer_file).read_text()).get("added_tokens", [])
    found = {a["content"]: a["id"] for a in added}
    for need in ("<|endoftext|>", "<|startoftranscript|>", "<|notimestamps|>"):
        if need not in found:
            raise ValueError(f"{tokenizer_file}: no {need} among the added tokens; not a Whisper tokenizer")
    return found


def _whisper_config(t: dict[str, np.ndarray], ct_cfg: dict, special: dict[str, int]):
    """The HF WhisperConfig of the tensors' shapes; `ct_cfg`: CTranslate2's config.json (suppressed ids)."""
    from transformers import WhisperConfig

    vocab, d_model = t["decoder/embeddings/weight"].shape
    eot = special["<|endoftext|>"]
    return WhisperConfig(
        vocab_size=vocab,
        num_mel_bins=t["encoder/conv1/weight"].shape[1],
        d_model=d_model,
        encoder_layers=len(_layers(t, "encoder")),
        decoder_layers=len(_layers(t, "decoder")),
        encoder_attention_heads=_scalar(t, "encoder/num_heads"),
        decoder_attention_heads=_scalar(t, "decoder/num_heads"),
        encoder_ffn_dim=t["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        decoder_ffn_dim=t["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        max_source_positions=t["encoder/position_encodings/encodings"].shape[0],
        max_target_positions=t["decoder/position_encodings/encodings"].shape[0],
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        decoder_start_token_id=special["<|startoftranscript|>"],
        begin_suppress_tokens=ct_cfg.get("suppress_ids_begin", [220, eot]),
        suppress_tokens=ct_cfg.get("suppress_ids", []),
        tie_word_embeddings=True,
    )


def _save_model(t: dict[str, np.ndarray], cfg, out: Path) -> None:
    """The mapped weights, checked to fill the HF model exactly, saved to `out`."""
    from transformers import WhisperForConditionalGeneration

    model = WhisperForConditionalGeneration(cfg)
    missing, unexpected = model.load_state_dict(state_dict(t), strict=False)
    missing = [k for k in missing if k != "proj_out.weight"]  # tied to the embeddings
    if missing or unexpected:
        raise ValueError(f"CTranslate2 -> HF Whisper mapping: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.tie_weights()
    model.save_pretrained(out)


def _save_processor(tokenizer_file: Path, cfg, out: Path) -> None:
    """The tokenizer and feature extractor saved to `out`."""
    from transformers import WhisperFeatureExtractor, WhisperProcessor, WhisperTokenizerFast

    eot = "<|endoftext|>"
    tok = WhisperTokenizerFast(
        tokenizer_file=str(tokenizer_file),
        bos_token=eot,
        eos_token=eot,
        unk_token=eot,
        pad_token=eot,
        model_max_length=cfg.max_target_positions,
    )
    WhisperProcessor(WhisperFeatureExtractor(feature_size=cfg.num_mel_bins), tok).save_pretrained(out)


def languages(ct_cfg: dict, special: dict[str, int]) -> dict[str, int]:
    """'<|en|>' -> id for the language tokens of CTranslate2's config.json (a multilingual checkpoint's)."""
    by_id = {i: tok for tok, i in special.items()}
    out = {by_id.get(i, ""): i for i in ct_cfg.get("lang_ids", [])}
    bad = [i for tok, i in out.items() if not re.fullmatch(r"<\|[a-z]{2,3}\|>", tok)]
    if bad or "<|en|>" not in out:
        raise ValueError(f"config.json lang_ids: {bad[:5] or 'no <|en|>'} are not language tokens of tokenizer.json")
    return out


def _generation_config(cfg, ct_cfg: dict, special: dict[str, int]):
    """Greedy transcription settings. A multilingual checkpoint (its vocabulary reaches the
    language tokens) gets the language and task ids that generate() and language detection read;
    an English-only one forces <|notimestamps|> after the start."""
    from transformers import GenerationConfig

    no_ts = special["<|notimestamps|>"]
    multilingual = cfg.vocab_size >= MULTILINGUAL_VOCAB
    extra = {}
    if multilingual:
        # task set: without it, transformers' generate() with no language detects the language but
        # then leaves <|transcribe|> out of the prompt (its old forced_decoder_ids route supplied it),
        # and the decoder babbles ("El El El ..."); a caller's task= still overrides it
        extra = {
            "task": "transcribe",
            "lang_to_id": languages(ct_cfg, special),
            "task_to_id": {task: special[f"<|{task}|>"] for task in TASKS},
            "prev_sot_token_id": special.get("<|startofprev|>"),
        }
    if ct_cfg.get("alignment_heads"):
        extra["alignment_heads"] = [list(h) for h in ct_cfg["alignment_heads"]]
    eot = cfg.eos_token_id
    return GenerationConfig(
        decoder_start_token_id=cfg.decoder_start_token_id,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        max_length=cfg.max_target_positions,
        begin_suppress_tokens=cfg.begin_suppress_tokens,
        suppress_tokens=cfg.suppress_tokens,
        no_timestamps_token_id=no_ts,
        is_multilingual=multilingual,
        forced_decoder_ids=None if multilingual else [[1, no_ts]],
        **extra,
    )
