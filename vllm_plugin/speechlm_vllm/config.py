"""The transformers config vLLM reads a speechlm folder's config.json into (registered for
`model_type: speechlm`, so no `--trust-remote-code` is needed and the folder's own remote config class
is never run).

vLLM's engine takes the decoder's shapes from `get_text_config()`: here `text_config`, the decoder's own
config class built from config.json's "decoder". Its `eos_token_id` becomes the folder's end-of-turn token
(what speechlm stops at; vLLM adds the generation config's EOS to every request's stop tokens).

Its `architectures` name the plugin's model class for the decoder: `SpeechLMForASR`, or
`SpeechLMHybridForASR` when vLLM's class for the decoder is a hybrid of attention and state-space
layers (Qwen3.5's Gated DeltaNet): vLLM sizes a hybrid's state caches from the model class's
`IsHybrid` methods, and a class is hybrid or not for every folder it serves (model.py).
"""

from __future__ import annotations

from transformers import CONFIG_MAPPING, PretrainedConfig

from .folder import is_speechlm_folder, load

ARCHITECTURE = "SpeechLMForASR"
HYBRID_ARCHITECTURE = "SpeechLMHybridForASR"


def decoder_architecture(text_config) -> str:
    archs = getattr(text_config, "architectures", None) or []
    if not archs:
        raise ValueError("the folder's decoder config names no architecture (decoder.architectures)")
    return archs[0]


def is_hybrid_decoder(text_config) -> bool:
    """Whether vLLM's class for the decoder is hybrid (vLLM's own inspection of its model classes: a
    class that does not import here is inspected as not hybrid; model.py then names why it fails)."""
    from vllm import ModelRegistry

    info = ModelRegistry._try_inspect_model_cls(decoder_architecture(text_config))
    return bool(info is not None and info.is_hybrid)


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
        if self.text_config is not None:
            self.architectures = [HYBRID_ARCHITECTURE if is_hybrid_decoder(self.text_config) else ARCHITECTURE]

    def get_text_config(self, *args, **kwargs):
        return self.text_config if self.text_config is not None else self

    def to_dict(self) -> dict:
        out = super().to_dict()
        for key, sub in (("text_config", "decoder"), ("audio_config", "encoder")):
            value = out.pop(key, None)
            if value is not None:
                out[sub] = value if isinstance(value, dict) else value.to_dict()
        return out


class DecoderConfigHook:
    """vLLM adjusts its settings per architecture before building a model (`MODELS_CONFIG_MAP`: Qwen3.5's
    drops its text model's M-RoPE fields and takes the state cache's dtype from the config). It looks up
    the served architecture, the plugin's; this hook, entered for the plugin's architectures, runs the
    decoder architecture's own."""

    @staticmethod
    def _decoder_hook(architecture: str | None):
        from vllm.model_executor.models.config import MODELS_CONFIG_MAP

        return MODELS_CONFIG_MAP.get(architecture) if architecture else None

    @classmethod
    def verify_and_update_config(cls, vllm_config) -> None:
        text = vllm_config.model_config.hf_text_config
        hook = cls._decoder_hook(decoder_architecture(text))
        if hook is not None:
            hook.verify_and_update_config(vllm_config)

    @classmethod
    def verify_and_update_model_config(cls, model_config) -> None:
        hook = cls._decoder_hook(decoder_architecture(model_config.hf_text_config))
        if hook is not None:
            hook.verify_and_update_model_config(model_config)

    @classmethod
    def install(cls, architectures) -> None:
        from vllm.model_executor.models.config import MODELS_CONFIG_MAP

        for arch in architectures:
            MODELS_CONFIG_MAP.setdefault(arch, cls)
