"""A speechlm model folder as the plugin reads it: its config.json and the code it carries.

Every rule the plugin shares with speechlm comes from the folder itself, never from a copy here: the
encoder family (features, `audio_token_count`, the encoder class and its forward) and the projector
from its generated `speechlm_core.py`, the prompt and the end-of-turn token from `speechlm_text.py`,
the token budget and the loop rule from `speechlm_generation.py`, the long-form cut from
`speechlm_longform.py` / `speechlm_cut.py` / `speechlm_stitch.py`. So a folder written by a newer
speechlm brings its own rules, and the plugin imports nothing of speechlm's training stack.

The folder's modules are imported as one package per folder (their imports of each other are relative),
under a name made from the folder's resolved path.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

SAMPLE_RATE = 16000
CONFIG = "config.json"


def is_speechlm_folder(path) -> bool:
    p = Path(str(path)) / CONFIG
    if not p.is_file():
        return False
    try:
        return json.loads(p.read_text()).get("model_type") == "speechlm"
    except (OSError, ValueError):
        return False


def read_config(path) -> dict:
    """config.json of a speechlm model folder; ValueError naming the folder when it is not one the plugin
    can serve (a checkpoint's folder refers to bases that live elsewhere: export it first)."""
    path = Path(str(path))
    if not is_speechlm_folder(path):
        raise ValueError(f"{path} is not a speechlm model folder (no config.json with model_type 'speechlm')")
    cfg = json.loads((path / CONFIG).read_text())
    for part in ("encoder", "decoder"):
        if not cfg["bases"][part].get("folder"):
            raise ValueError(
                f"{path}: its {part} base is '{cfg['bases'][part]['id']}', outside the folder; vLLM serves a "
                "self-contained folder: a run's final/, or `speechlm export CHECKPOINT OUT` (--merge-lora for "
                "the decoder merged)"
            )
    if cfg["trainable"].get("encoder") and not (path / cfg["bases"]["encoder"]["folder"]).is_dir():
        raise ValueError(f"{path}: the trained encoder's folder is missing")
    return cfg


def _package(path: Path):
    """The folder's modules as a package (imported once per folder and process)."""
    name = "speechlm_folder_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    if name not in sys.modules:
        spec = importlib.util.spec_from_loader(name, loader=None, is_package=True)
        pkg = importlib.util.module_from_spec(spec)
        pkg.__path__ = [str(path.resolve())]
        sys.modules[name] = pkg
    return name


class Folder:
    """One folder's settings and code: `family`, `settings` (config.json's "speechlm"), `core`, `text`,
    `generation`, `longform`, `cut`, `stitch` modules; the tokenizer on first use."""

    def __init__(self, path):
        self.path = Path(str(path)).resolve()
        self.config = read_config(self.path)
        pkg = _package(self.path)
        mod = lambda n: importlib.import_module(f"{pkg}.{n}")  # noqa: E731
        self.core = mod("speechlm_core")
        self.text = mod("speechlm_text")
        self.generation = mod("speechlm_generation")
        self.longform = mod("speechlm_longform")
        self.cut = mod("speechlm_cut")
        self.stitch = mod("speechlm_stitch")
        fam = self.core.FAMILIES.get(self.config["encoder_family"])
        if fam is None:
            raise ValueError(
                f"{self.path}: encoder family '{self.config['encoder_family']}' is not in the folder's code "
                f"(it has {sorted(self.core.FAMILIES)})"
            )
        enc_config = fam.pretrained_class.config_class.from_dict(self.config["encoder"])
        self.family = fam(enc_config, self.config["features"])
        self.settings = SimpleNamespace(**self.config["speechlm"])

    # ------------------------------------------------------------------ text
    @functools.cached_property
    def tokenizer(self):
        """The folder's tokenizer, loaded as speechlm loads it (speechlm_text.load_tokenizer)."""
        from transformers import PretrainedConfig

        config = PretrainedConfig.from_dict(self.config)  # AutoTokenizer need not resolve model_type speechlm
        return self.text.load_tokenizer(str(self.path), self.settings.audio_token, config=config)

    @functools.cached_property
    def audio_token_id(self) -> int:
        return self.text.audio_token_id(self.tokenizer, self.settings.audio_token)

    @functools.cached_property
    def end_of_turn_id(self) -> int:
        return self.text.end_of_turn_id(self.tokenizer)

    def prompt_ids(self, n_audio: int) -> list[int]:
        """speechlm's prompt for a clip with `n_audio` placeholders (speechlm_text.prompt_ids, verbatim)."""
        s = self.settings
        return self.text.prompt_ids(self.tokenizer, n_audio, s.prompt, s.audio_token, s.system_prompt)

    # ------------------------------------------------------------------ languages and tasks
    @property
    def languages(self) -> list[str]:
        """The languages the model serves (its `languages`; a model that lists none: English)."""
        return list(getattr(self.settings, "languages", None) or ["en"])

    @property
    def multilingual(self) -> bool:
        return bool(getattr(self.settings, "languages", None))

    def asked_ids(self, n_audio: int, language=None, task: str = "transcribe", context=None) -> tuple[list, list]:
        """(the prompt of a clip asked `language`, `task` and `context`, the answer tokens given for it: a
        pinned language's opening), as SpeechLM.transcribe asks (speechlm_core's Prompting._asked and
        _prefix_ids); a model that lists no languages is asked none, as speechlm's server asks it."""
        s = self.settings
        language = language if self.multilingual else None
        context = self.text.context_text(self.tokenizer, context, s.audio_token) if context else None
        templates = getattr(s, "task_prompts", None)
        instruction = self.text.task_prompt(s.prompt, task, language, None, templates, context)
        prompt = self.text.prompt_ids(self.tokenizer, n_audio, instruction, s.audio_token, s.system_prompt)
        given = []
        if language and getattr(s, "answer_language", False):
            opening = self.text.answer_prefix(language, "en" if task == self.text.TRANSLATE else None)
            given = list(self.tokenizer(opening.strip(), add_special_tokens=False)["input_ids"])
        return prompt, given

    def pinned(self, prompt_ids: list[int]) -> tuple[str | None, int]:
        """(the language whose opening a prompt ends with, its length in tokens), or (None, 0): what the
        engine's stop rules need of a request built by `asked_ids` (its budget is that language's, and
        the opening spends it)."""
        for lang, given in self._openings:
            if list(prompt_ids[-len(given) :]) == given:
                return lang, len(given)
        return None, 0

    @functools.cached_property
    def _openings(self) -> list[tuple[str, list[int]]]:
        """(language, a pin's opening ids) for every listed language, transcription and translation: made
        once per folder, not per request (the engine reads every request's pin off its prompt)."""
        if not getattr(self.settings, "answer_language", False):
            return []
        pairs = [
            (lang, self.asked_ids(1, lang, task)[1]) for lang in self.languages for task in ("transcribe", "translate")
        ]
        return [(lang, given) for lang, given in pairs if given]

    # ------------------------------------------------------------------ audio arithmetic
    @property
    def pool_stride(self) -> int:
        return int(self.settings.projector_pool_stride)

    def audio_tokens(self, num_samples: int) -> int:
        """Placeholders for a clip of `num_samples` (the family's audio_token_count: the one count)."""
        return self.family.audio_token_count(int(num_samples), self.pool_stride)

    @property
    def max_samples(self) -> int | None:
        return self.family.features.max_samples

    def long_form(self, **fields):
        """The folder's LongForm (defaults, or `fields`), capped at the encoder's longest input."""
        return self.longform.LongForm(**fields).capped(self.family.max_seconds)

    def spans(self, wave, long_form) -> list[tuple[int, int]]:
        """The ranges of one recording speechlm transcribes (speechlm_cut.clip_spans, min one hop)."""
        return self.cut.clip_spans(wave, long_form, self.family.features.min_samples)


@functools.lru_cache(maxsize=8)
def load(path) -> Folder:
    return Folder(path)
