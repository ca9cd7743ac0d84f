"""transformers model of a speechlm model folder (AutoModel with trust_remote_code).

`SpeechLMForASR.model` is speechlm's own `SpeechLM` module (speechlm_core.py is generated from
speechlm's source), holding the encoder, the projector and the decoder with its LoRA adapter. It is
built by the folder reader speechlm itself uses (speechlm_core.assemble_folder_model); only fetching the
bases is this file's own: from this folder (encoder/, decoder/) or from the Hub by id and revision.

    model = AutoModel.from_pretrained(folder, trust_remote_code=True)
    model.transcribe([wave_16k_float32, ...])     # one text per clip (any length: cut into windows)
    stream = model.stream()                       # live: speechlm's Streamer (speechlm_streaming.py)
    for piece in pieces:
        for event in stream.feed(piece):          # text committed as the audio arrives, never taken back
            print(event.delta, end="")
    stream.finish()
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from .configuration_speechlm import SpeechLMConfig
from .speechlm_audio_checks import check_clips
from .speechlm_batching import transcribe_long, transcribe_windows
from .speechlm_core import DTYPES, FAMILIES, TokenLoss, assemble_folder_model, base_in_folder, read_config
from .speechlm_longform import DEFAULT_LONG_FORM, LongForm
from .speechlm_stitch import timed_clip
from .speechlm_stream_settings import DEFAULT_STREAM_SETTINGS, StreamSettings
from .speechlm_streaming import Streamer
from .speechlm_text import language_code


def _local_folder(name_or_path, revision=None, **hub) -> Path:
    if Path(name_or_path).is_dir():
        return Path(name_or_path)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(str(name_or_path), revision=revision, **hub))


def _base(folder: Path, config: dict, part: str) -> tuple[str, str | None]:
    """(what from_pretrained loads, revision) for the folder's encoder or decoder base."""
    ref = config["bases"][part]
    inside = base_in_folder(folder, ref)
    if inside is not None:
        return inside, None
    if ref.get("source") == "hub":
        return ref["id"], ref.get("revision")
    raise ValueError(
        f"{folder}: its {part} base is '{ref['id']}', a {ref.get('source')} model the Hub does not have; load "
        "this checkpoint with speechlm, or write the self-contained folder (`speechlm export CHECKPOINT OUT`), "
        "which carries the bases' weights, and load that"
    )


class SpeechLMForASR(PreTrainedModel):
    config_class = SpeechLMConfig
    base_model_prefix = "speechlm"
    main_input_name = "input_features"
    _no_split_modules = []

    def __init__(self, config: SpeechLMConfig, model=None):
        super().__init__(config)
        if model is None:
            raise ValueError("SpeechLMForASR is built by from_pretrained(folder): the folder names its bases")
        # before the loaded modules are attached: post_init would re-initialize what it finds (the adapter)
        self.post_init()
        self.model = model
        self.tokenizer = model.tokenizer

    def _init_weights(self, module):
        pass  # every weight comes from the folder and its bases

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, config=None, revision=None, **kwargs):
        hub = {k: kwargs[k] for k in ("token", "cache_dir", "local_files_only") if kwargs.get(k) is not None}
        folder = _local_folder(pretrained_model_name_or_path, revision, **hub)
        raw = read_config(folder)
        if not isinstance(config, SpeechLMConfig):
            config = SpeechLMConfig.from_pretrained(folder)
        family_cls = FAMILIES[raw["encoder_family"]]
        family = family_cls(family_cls.pretrained_class.config_class.from_dict(raw["encoder"]), raw["features"])
        dtype = DTYPES[raw["dtype"]]
        src, rev = _base(folder, raw, "encoder")
        attn = {"attn_implementation": family.attn_implementation} if family.attn_implementation else {}
        encoder = family.pretrained_class.from_pretrained(
            src, config=family.config, dtype=dtype, revision=rev, **attn, **family.load_kwargs, **hub
        )
        encoder = family.after_load(encoder, dtype)
        src, rev = _base(folder, raw, "decoder")
        decoder_config = CONFIG_MAPPING[raw["decoder"]["model_type"]].from_dict(raw["decoder"])
        decoder = AutoModelForCausalLM.from_pretrained(src, config=decoder_config, dtype=dtype, revision=rev, **hub)
        tokenizer = AutoTokenizer.from_pretrained(folder, config=config)
        settings = SimpleNamespace(**raw["speechlm"])
        # inference only: the training loss (and its optional CUDA kernels) does not travel
        model = assemble_folder_model(folder, raw, settings, encoder, decoder, tokenizer, family, TokenLoss())
        return cls(config, model).eval()

    @property
    def family(self):
        return self.model.family

    def get_input_embeddings(self):
        return self.model._base_lm().get_input_embeddings()

    def forward(self, input_features, feature_mask, input_ids, attention_mask, labels=None, **kwargs):
        """Logits at the label positions (speechlm's SpeechLM.label_logits), for checks against speechlm."""
        return self.model.label_logits(input_features, feature_mask, input_ids, attention_mask, labels)

    @torch.no_grad()
    def transcribe(
        self,
        waves,
        batch_size: int = 16,
        max_new_tokens: int | None = None,
        timestamps: bool = False,
        long_form: LongForm = DEFAULT_LONG_FORM,
        language: str | None = None,
        task: str = "transcribe",
        prompt: str | None = None,
        **settings,
    ) -> list:
        """16 kHz mono float clips of any length -> transcripts, exactly as `speechlm transcribe` does
        (the same cut, speechlm_longform.py: by default at every pause, silence left out). `long_form`,
        or its fields as keywords (`strategy="pause"`, `window_seconds=30`, ...), says how long audio is
        cut; the window is at most the encoder's limit. With `timestamps`, per clip {"text", "segments",
        "words"}: each word's start and end in seconds of the recording and its confidence, from the
        model's own CTC head (speechlm_align.py). A clip with no samples or non-finite ones is refused
        (`AudioError`, a ValueError naming it: `clip 3: ...`); one shorter than the encoder's smallest
        input is padded with silence (speechlm_audio_checks.py).

        `language` (of every clip; `es`, `es-ES`, `spanish` or `<|es|>`, one the model lists) is pinned: the
        prompt states it and the answer is in it, never a translation; None: the model detects it. `task`:
        transcribe, translate (into English), or a task of the model's `task_prompts`. A model that lists
        no languages is English only: English is asked of it as no language is, another is refused.
        `prompt`: context, as OpenAI's `prompt` is for Whisper (earlier words, names, spellings), after the
        instruction in the user turn, as `speechlm transcribe --prompt` asks it."""
        lf = replace(long_form, **settings).capped(self.model.family.max_seconds)
        waves = check_clips(waves)  # a bad clip (no samples, NaN, not mono) named before any is transcribed
        min_samples = self.model.features.min_samples
        asked = self._asked(language, task, prompt)
        if not timestamps:
            run = lambda batch: self.model.transcribe(batch, max_new_tokens=max_new_tokens, **asked)  # noqa: E731
            return transcribe_long(run, waves, lf, batch_size, min_samples)
        run = lambda batch: self.model.transcribe(batch, max_new_tokens=max_new_tokens, timestamps=True, **asked)  # noqa: E731
        spans, outs = transcribe_windows(run, waves, lf, batch_size, min_samples)
        return [timed_clip(sp, out, lf.strategy, w) for sp, out, w in zip(spans, outs, waves)]

    def _asked(self, language, task: str, prompt: str | None = None) -> dict:
        """SpeechLM.transcribe's `language`, `task` and `context` for a call's (as `speechlm transcribe` and
        the server ask them); none for plain transcription, so the prompt is the one the model was trained on."""
        if prompt is not None and not isinstance(prompt, str):
            raise ValueError(f"prompt must be text (the context for every clip), got {type(prompt).__name__}")
        context = {"context": prompt} if prompt and prompt.strip() else {}
        if language is not None and not isinstance(language, str):
            raise ValueError(f"language must be one language for every clip (a string), got {language!r}")
        served = list(getattr(self.model.cfg, "languages", None) or [])
        code = None if language is None else language_code(language, served or ["en"])
        if not served:
            code = None  # an English-only model was trained on prompts that state no language
        asked = {} if code is None and task == "transcribe" else {"language": code, "task": task}
        return asked | context

    def stream(self, settings: StreamSettings = DEFAULT_STREAM_SETTINGS, **fields) -> Streamer:
        """A live stream on this model, speechlm's own (`speechlm transcribe --live` and the server run
        it): `feed(piece)` 16 kHz float pieces of any length, each call's events ({delta, words, text,
        seconds, final}) the text committed meanwhile; `finish()` commits the rest. `settings` (or its
        fields as keywords: `chunk_seconds=1.0`, `agreement=3`, ...): speechlm_stream_settings.py."""
        return Streamer(self.model, replace(settings, **fields))
