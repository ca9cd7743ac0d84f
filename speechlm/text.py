"""Tokenizer loading and the one conversation used by both training and inference.

The user turn is `audio_token * n + "\\n" + prompt`; the assistant turn is the transcript.
`prompt_ids` renders the user turn through the chat template with the generation prompt, and it
is the prefix of every training example AND the whole input at inference. Training appends only
`target_ids` (transcript + end-of-turn). The assistant turn is never rendered through the template,
so a template that injects an empty `<think></think>` block into a rendered assistant turn (Qwen3,
Qwen3.5) can't make training and inference differ (pitfall 10). Thinking is switched off
(`enable_thinking=False`) so the prompt ends exactly as the pretrained model expects for a direct
answer; templates that don't know the flag ignore it.
"""

from __future__ import annotations

import logging
import weakref

from transformers import AutoTokenizer, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

_SENTINEL = "SPEECHLM-END-OF-TURN-PROBE"
_EOT_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def load_tokenizer(text_model_id: str, audio_token: str = "<audio>", trust_remote_code: bool = False, config=None):
    """AutoTokenizer for `text_model_id` (hub id or local dir), with `audio_token` as a special token.
    `config`: the model's config when the caller has it (a speechlm folder's: AutoTokenizer need not read it)."""
    tok = AutoTokenizer.from_pretrained(text_model_id, trust_remote_code=trust_remote_code, config=config)
    if tok.convert_tokens_to_ids(audio_token) in (None, tok.unk_token_id):
        tok.add_special_tokens({"extra_special_tokens": [audio_token]}, replace_extra_special_tokens=False)
        log.info("added %s to the tokenizer as id %d", audio_token, tok.convert_tokens_to_ids(audio_token))
    if tok.chat_template is None:
        raise ValueError(f"tokenizer of {text_model_id} has no chat template")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def audio_token_id(tok: PreTrainedTokenizerBase, audio_token: str = "<audio>") -> int:
    tid = tok.convert_tokens_to_ids(audio_token)
    if tid is None or tid == tok.unk_token_id:
        raise ValueError(f"audio token {audio_token!r} is not in the tokenizer (use load_tokenizer)")
    return tid


def end_of_turn_id(tok: PreTrainedTokenizerBase) -> int:
    """The token the chat template closes an assistant turn with, found by rendering a turn.

    Training appends it to every transcript and generation stops at it, so it must be what the
    pretrained model emits after an answer: read from the template, never assumed.
    """
    try:
        template, tid = _EOT_CACHE[tok]
        if template == tok.chat_template:  # the collator asks per example: render once per template
            return tid
    except (KeyError, TypeError):
        pass
    conv = [{"role": "user", "content": "x"}, {"role": "assistant", "content": _SENTINEL}]
    rendered = tok.apply_chat_template(conv, tokenize=False)
    if _SENTINEL not in rendered:
        raise ValueError("the chat template does not render the assistant's content; can't find its end-of-turn token")
    suffix = rendered.rsplit(_SENTINEL, 1)[1]
    ids = tok(suffix, add_special_tokens=False)["input_ids"] if suffix.strip() else []
    if ids:
        tid = ids[0]
        special = set(tok.all_special_ids) | set(tok.added_tokens_decoder)
        if tid not in special:
            raise ValueError(
                f"the chat template closes an assistant turn with {suffix!r}, which does not start "
                "with a special token; speechlm needs a single end-of-turn token"
            )
    elif tok.eos_token_id is not None:
        tid = tok.eos_token_id  # templates that leave the end of a turn to the tokenizer's EOS
    else:
        raise ValueError("the chat template ends an assistant turn with nothing and the tokenizer has no EOS token")
    try:
        _EOT_CACHE[tok] = (tok.chat_template, tid)
    except TypeError:
        pass
    return tid


def prompt_ids(
    tok: PreTrainedTokenizerBase, n_audio: int, prompt: str, audio_token: str = "<audio>", system: str | None = None
) -> list[int]:
    """Token ids of the user turn (n audio placeholders, newline, prompt) plus the generation prompt.

    `system`: None lets the template add its default system turn (SmolLM2's is 16 tokens, on every
    clip); a string, "" included, is rendered as an explicit system turn instead."""
    user = {"role": "user", "content": audio_token * n_audio + "\n" + prompt}
    conv = [user] if system is None else [{"role": "system", "content": system}, user]
    enc = tok.apply_chat_template(
        conv, add_generation_prompt=True, tokenize=True, enable_thinking=False, return_dict=True
    )
    ids = list(enc["input_ids"])
    got = ids.count(audio_token_id(tok, audio_token))
    if got != n_audio:  # a template or tokenizer that merges/splits the placeholder would misalign audio
        raise ValueError(f"prompt holds {got} {audio_token} tokens, expected {n_audio}")
    return ids


def target_ids(tok: PreTrainedTokenizerBase, transcript: str) -> list[int]:
    """The assistant turn's tokens: the transcript, then the template's end-of-turn token."""
    return list(tok(transcript, add_special_tokens=False)["input_ids"]) + [end_of_turn_id(tok)]
