"""The tiny offline twin: small models with the real architectures, saved as plain HF dirs.

`ensure("qwen3_5")` builds (once, deterministically) and returns a local directory that loads
through exactly the same `from_pretrained` code as a hub id:

- `granite_speech5`, `whisper`: each encoder family's own twin (`FAMILY.build_tiny` in its file
  under speechlm/model/encoders/): the hub checkpoints' class, small, plus `preprocessor_config.json`;
- `qwen3_5`: a small `Qwen3_5ForCausalLM` with the hybrid linear/full attention layer pattern;
- `qwen3`: a small `Qwen3ForCausalLM`;
both decoders ship the same locally trained byte-level BPE tokenizer with a Qwen3-style ChatML
chat template (including its think-block behaviour) and the `<audio>` token;
- `llama3`: a small `LlamaForCausalLM` whose tokenizer speaks Llama 3's template: header tokens,
  turns closed by `<|eot_id|>`, while its EOS is `<|end_of_text|>` (so nothing that assumes
  end-of-turn == EOS or ChatML can pass its tests).

Model ids `tiny/<name>` resolve through `speechlm.model.ids.resolve`; directories live under `$SPEECHLM_CACHE`
(default `~/.cache/speechlm`) in `tiny/<name>-v<VERSION>`.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import torch

from speechlm.cache import build_once

VERSION = 2  # 2: encoder CTC vocabulary 64 (room for word-level CTC pretraining)
NAMES = ("granite_speech5", "whisper", "qwen3_5", "qwen3", "llama3")
PREFIX = "tiny/"

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<audio>"]
ADDED_TOKENS = ["<think>", "</think>"]

# Qwen3's template, trimmed to what matters here: ChatML turns; the LAST assistant turn of a
# rendered conversation gets an (empty) think block, and with enable_thinking=False the
# generation prompt gets one too. That asymmetry is pitfall 10, kept on purpose so the tests see it.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{%- set content = message.content %}"
    "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{%- if loop.last %}"
    "{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' + content + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

LLAMA3_SPECIAL_TOKENS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<audio>",
]
# Llama 3's template, trimmed: BOS, then header-delimited turns each closed by <|eot_id|>
LLAMA3_CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"  # noqa: E501
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}"
)

_TEXT = """\
the quick brown fox jumps over the lazy dog. a stitch in time saves nine.
transcribe the audio. hello world, how are you today? i am fine, thank you.
one two three four five six seven eight nine ten eleven twelve hundred thousand.
red green blue yellow black white orange purple brown grey pink.
monday tuesday wednesday thursday friday saturday sunday morning evening night.
the cat sat on the mat and the dog ran in the park with a ball.
she said that he would come back later to see what they were doing there.
we need more time, money, water, food and people to build this new house.
speech recognition turns sound into text; the model listens and writes words.
John, Mary, London, Paris, Berlin, Tokyo, America, English, Monday.
"""


def _corpus() -> list[str]:
    lines = _TEXT.splitlines()
    lines += [" ".join("abcdefghijklmnopqrstuvwxyz"), " ".join("ABCDEFGHIJKLMNOPQRSTUVWXYZ"), "0 1 2 3 4 5 6 7 8 9"]
    return lines * 4


def ensure(name: str) -> Path:
    """The directory of tiny model `name`, built once."""
    if name not in NAMES:
        raise ValueError(f"unknown tiny model '{name}'; known: {', '.join(NAMES)}")
    return build_once("tiny", name, VERSION, _BUILDERS[name])


# --------------------------------------------------------------------------- builders


def build_tokenizer(style: str = "chatml"):
    """The tiny byte-level BPE tokenizer with the chat template of `style` ("chatml" or "llama3")."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    specials = LLAMA3_SPECIAL_TOKENS if style == "llama3" else SPECIAL_TOKENS
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(_corpus(), trainer=trainer)
    if style == "llama3":
        return PreTrainedTokenizerFast(
            tokenizer_object=tk,
            bos_token="<|begin_of_text|>",
            eos_token="<|end_of_text|>",  # no pad token, like the real one: load_tokenizer falls back to EOS
            extra_special_tokens=["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<audio>"],
            chat_template=LLAMA3_CHAT_TEMPLATE,
            model_max_length=4096,
        )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=["<|im_start|>", "<|im_end|>", "<audio>"],
        chat_template=CHAT_TEMPLATE,
        model_max_length=4096,
    )
    tok.add_tokens(ADDED_TOKENS)
    return tok


def _vocab_size(tok) -> int:
    # like the real Qwen checkpoints: the embedding table has spare rows past the tokenizer
    return ((len(tok) + 63) // 64) * 64


def _save_decoder(out: Path, model_cls, config_cls, style: str = "chatml", **arch) -> None:
    """A tiny decoder with the shared small shape plus `arch`, and the tokenizer, saved to `out`."""
    tok = build_tokenizer(style)
    torch.manual_seed(0)
    cfg = config_cls(
        vocab_size=_vocab_size(tok),
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
        **arch,
    )
    model_cls(cfg).save_pretrained(out)
    tok.save_pretrained(out)


def _build_qwen3_5(out: Path) -> None:
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    # default layer_types for 4 layers: 3 linear_attention then 1 full_attention
    _save_decoder(
        out,
        Qwen3_5ForCausalLM,
        Qwen3_5TextConfig,
        num_hidden_layers=4,
        linear_num_key_heads=2,
        linear_key_head_dim=16,
        linear_num_value_heads=4,
        linear_value_head_dim=16,
    )


def _build_qwen3(out: Path) -> None:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    _save_decoder(out, Qwen3ForCausalLM, Qwen3Config, num_hidden_layers=2)


def _build_llama3(out: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    _save_decoder(out, LlamaForCausalLM, LlamaConfig, style="llama3", num_hidden_layers=2)


def _encoder_twin(module: str):
    """An encoder family's own tiny-twin builder (each family file keeps its twin with it)."""
    return lambda out: importlib.import_module(module).FAMILY.build_tiny(out)


_BUILDERS = {
    "granite_speech5": _encoder_twin("speechlm.model.encoders.granite"),
    "whisper": _encoder_twin("speechlm.model.encoders.whisper"),
    "qwen3_5": _build_qwen3_5,
    "qwen3": _build_qwen3,
    "llama3": _build_llama3,
}
