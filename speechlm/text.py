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

import functools
import logging
import re
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


# ------------------------------------------------------------------ languages and tasks (docs/languages.md)
# The prompt of a clip is its task's template; a given language adds LANGUAGE_NOTE. A transcription's
# template is the model's own prompt (`model.prompt`), so a clip with no language and task `transcribe`
# is prompted exactly as before tasks existed. Custom tasks bring their templates (`model.task_prompts`).
TRANSCRIBE, TRANSLATE = "transcribe", "translate"
TASK_TEMPLATES = {TRANSCRIBE: "{prompt}", TRANSLATE: "Translate the audio into {target}."}
LANGUAGE_NOTE = " The speech is in {language}."
# detect-or-pin: the answer opens with the spoken language's English name, as Qwen3-ASR's does ("language
# Spanish: hola"); a caller pins a language by writing that opening itself (a prefix the model goes on
# from). The name, not the ISO code: a byte-level BPE holds " French" and " Japanese" as common tokens but
# "fr" and "ja" as rare ones, and a decoder trained briefly keeps its prior for the frequent codes ("en",
# "es", "de" took every French clip: docs/languages.md, "The answer's opening")
# A translation's opening names its target too ("language German to English: Anna visited Rome"), so
# after "language German:" the training answers go on in German only: a pin cannot be read as a request
# to translate (docs/languages.md, "The answer's opening")
ANSWER_LANGUAGE = re.compile(r"^language ([A-Za-z][A-Za-z ]*?)(?: to [A-Za-z][A-Za-z ]*?)?:\s*")
# audio with no speech (silence, noise, music) is answered "language None:" and nothing after it, as
# Qwen3-ASR answers it: the first answer token is always "language", and the model tells speech from none
# where it tells languages apart. Without it, a model asked no language opened non-speech with a language
# and went on with made-up text (docs/languages.md, "Audio with no speech")
NO_SPEECH = "None"


# a caller's context (OpenAI's `prompt`: earlier words, names, spellings) rides in the user turn after the
# instruction; as in OpenAI's API only its last 224 tokens count (Whisper's limit on a prompt)
CONTEXT_NOTE = "\nContext: {context}"
CONTEXT_TOKENS = 224


def context_text(tok: PreTrainedTokenizerBase, context: str | None, audio_token: str = "<audio>") -> str | None:
    """`context` as the user turn takes it: the tokenizer's special tokens and the audio placeholder taken
    out (a caller's text can neither close the turn nor add audio), whitespace collapsed, its last
    CONTEXT_TOKENS tokens; None when nothing is left."""
    if not context:
        return None
    specials = {audio_token, *tok.all_special_tokens}
    specials |= {t.content for t in getattr(tok, "added_tokens_decoder", {}).values() if t.special}
    while any(s and s in context for s in specials):
        for s in sorted(filter(None, specials), key=len, reverse=True):
            context = context.replace(s, " ")
    context = " ".join(context.split())
    ids = tok(context, add_special_tokens=False)["input_ids"]
    if len(ids) > CONTEXT_TOKENS:
        context = " ".join(tok.decode(ids[-CONTEXT_TOKENS:]).split())
    return context or None


def language_names() -> dict[str, str]:
    """ISO 639-1 code (Whisper's table: 99 languages and yue) -> English name."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES  # a table only; no model loads

    return dict(LANGUAGES)


def check_language(code: str | None, key: str = "language") -> str | None:
    """`code` when it is a known ISO 639-1 code (or None); ValueError naming `key` otherwise."""
    if code is not None and code not in language_names():
        raise ValueError(f"{key}: unknown language {code!r}; use an ISO 639-1 code such as en, es, de, fr, ja")
    return code


def language_code(value: str, served: list[str]) -> str:
    """The ISO 639-1 code a caller names (`es`, `es-ES`, `es_ES`, its English name `spanish`, or Whisper's
    token `<|es|>`: what OpenAI's `language` field and Whisper's `generate_kwargs` take), when `served`
    (a model's languages) holds it; ValueError naming the languages served otherwise."""
    key = value.strip().lower().replace("_", "-")
    if key.startswith("<|") and key.endswith("|>"):
        key = key[2:-2]
    names = {name: code for code, name in language_names().items()}
    code = names.get(key, key.split("-")[0])
    if code not in served:
        raise ValueError(
            f"language '{value}' is not supported: this model serves {', '.join(served)} (ISO 639-1 codes)"
        )
    return code


def task_prompt(
    prompt: str,
    task: str = TRANSCRIBE,
    language: str | None = None,
    target: str | None = None,
    templates: dict[str, str] | None = None,
    context: str | None = None,
) -> str:
    """The instruction of a clip: its task's template (`prompt` is the model's transcription prompt),
    naming the translation's `target` language, plus the spoken `language` when it is given, then the
    caller's `context` (already `context_text`) when there is one."""
    names = language_names()
    every = {**TASK_TEMPLATES, **(templates or {})}
    if task not in every:
        raise ValueError(
            f"task {task!r} has no prompt template (known: {', '.join(sorted(every))}; see model.task_prompts)"
        )
    for key, code in (("language", language), ("target language", target)):
        check_language(code, key)
    if task == TRANSLATE and target is None:
        target = "en"  # OpenAI's translations are into English
    out = every[task].format(prompt=prompt, target=names[target].title() if target else "", language="")
    if language:
        out += LANGUAGE_NOTE.format(language=names[language].title())
    if context:
        out += CONTEXT_NOTE.format(context=context)
    return out


def answer_prefix(language: str | None, target: str | None = None) -> str:
    """The opening of a detect-or-pin answer that names `language` ("language Spanish: "), and the
    `target` language of a translation ("language Spanish to English: "); for None, that of audio with
    no speech ("language None:", the whole answer)."""
    if language is None:
        return f"language {NO_SPEECH}:"
    names = language_names()
    into = f" to {names[check_language(target, 'target language')].title()}" if target else ""
    return f"language {names[check_language(language)].title()}{into}: "


def split_answer(answer: str) -> tuple[str | None, str]:
    """(the ISO 639-1 code of the language an answer opens with, or None; the rest of the answer). An
    answer that says it heard no speech ("language None: ...") is (None, the rest)."""
    m = _opening(answer)
    if m is None:
        return None, answer.strip()
    return _codes().get(m.group(1).lower()), answer[m.end() :].strip()


def opens(answer: str) -> bool:
    """Whether `answer` begins with a whole opening: a language's, or the no-speech one."""
    return _opening(answer) is not None


def _opening(answer: str):
    m = ANSWER_LANGUAGE.match(answer)
    names = m and m.group(1).lower()
    return m if names and (names in _codes() or names == NO_SPEECH.lower()) else None


@functools.cache
def _codes() -> dict[str, str]:
    """English name -> ISO 639-1 code, built once: every answer's opening is read with it."""
    return {name: code for code, name in language_names().items()}
