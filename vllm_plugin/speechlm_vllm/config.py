"""The transformers config vLLM reads a speechlm folder's config.json into (registered for
`model_type: speechlm`, so no `--trust-remote-code` is needed and the folder's own remote config class
is never run).

vLLM's engine takes the decoder's shapes from `get_text_config()`: here `text_config`, the decoder's own
config class built from config.json's "decoder". Its `eos_token_id` becomes the folder's end-of-turn token
(what speechlm stops at; vLLM adds the generation config's EOS to every request's stop tokens).
"""

from __future__ import annotations

from transformers import CONFIG_MAPPING, PretrainedConfig

from .folder import is_speechlm_folder, load


class SpeechLMVllmConfig(PretrainedConfig):
    model_type = "speechlm"

    def __init__(self, encoder: dict | None = None, decoder: dict | None = None, **kwargs):
        self.text_config = CONFIG_MAPPING[decoder["model_type"]].from_dict(decoder) if decoder else None
        self.audio_config = CONFIG_MAPPING[encoder["model_type"]].from_dict(encoder) if encoder else None
        path = kwargs.get("name_or_path")
        super().__init__(**kwargs)
        if self.text_config is not None and path and is_speechlm_folder(path):
            eot = load(path).end_of_turn_id
            self.text_config.eos_token_id = eot
            self.eos_token_id = eot

    def get_text_config(self, *args, **kwargs):
        return self.text_config if self.text_config is not None else self

    def to_dict(self) -> dict:
        out = super().to_dict()
        for key, sub in (("text_config", "decoder"), ("audio_config", "encoder")):
            value = out.pop(key, None)
            if value is not None:
                out[sub] = value if isinstance(value, dict) else value.to_dict()
        return out
