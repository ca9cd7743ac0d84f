"""transformers config of a speechlm export (AutoConfig with trust_remote_code)."""

from __future__ import annotations

from transformers import PretrainedConfig


class SpeechLMConfig(PretrainedConfig):
    """Everything needed to rebuild the model without speechlm: the encoder family and its config
    (`encoder`), the decoder's config (`decoder`), the LoRA adapter's config (`lora`, None when merged
    or absent), the projector's shape, the speechlm model settings (`speechlm`: prompt, audio token,
    pool stride, max_new_tokens, ...), the family's feature settings (`features`), where the encoder's
    and decoder's weights come from (`bases`: a Hub id and revision, or a sub-folder of this folder),
    which parts the run trained (`trainable`) and the projector's calibration."""

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
        bases: dict | None = None,
        trainable: dict | None = None,
        calibration: dict | None = None,
        format: int = 2,
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
        self.bases = bases or {}
        self.trainable = trainable or {}
        self.calibration = calibration
        self.format = format
        super().__init__(**kwargs)
