"""transformers config of a speechlm export (AutoConfig with trust_remote_code)."""

from __future__ import annotations

from transformers import PretrainedConfig


class SpeechLMConfig(PretrainedConfig):
    """Everything needed to rebuild the model without speechlm: the encoder family and its config
    (`encoder`), the decoder's config (`decoder`), the LoRA adapter's config (`lora`, None when merged
    or absent), the projector's shape, the speechlm model settings (`speechlm`: prompt, audio token,
    pool stride, max_new_tokens, ...) and the family's feature settings (`features`)."""

    model_type = "speechlm"

    def __init__(
        self,
        encoder_family: str = "",
        encoder: dict | None = None,
        decoder: dict | None = None,
        lora: dict | None = None,
        speechlm: dict | None = None,
        features: dict | None = None,
        projector_dtype: str = "float32",
        bf16: bool = True,
        **kwargs,
    ):
        self.encoder_family = encoder_family
        self.encoder = encoder or {}
        self.decoder = decoder or {}
        self.lora = lora
        self.speechlm = speechlm or {}
        self.features = features or {}
        self.projector_dtype = projector_dtype
        self.bf16 = bf16
        super().__init__(**kwargs)
