"""transformers model of a speechlm export (AutoModel with trust_remote_code).

`SpeechLMForASR.model` is speechlm's own `SpeechLM` module (speechlm_core.py is generated from
speechlm's source), holding the encoder, the projector and the decoder with its LoRA adapter.

    model = AutoModel.from_pretrained(folder, trust_remote_code=True)
    model.transcribe([wave_16k_float32, ...])     # one text per clip (any length: cut into windows)
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from .configuration_speechlm import SpeechLMConfig
from .speechlm_core import FAMILIES, Projector, SpeechLM, TokenLoss
from .speechlm_longform import DEFAULT_STRATEGY, MERGE_SECONDS, MIN_PAUSE_SECONDS, THRESHOLD_DB, transcribe_long

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _config(d: dict):
    return CONFIG_MAPPING[d["model_type"]].from_dict(d)


class SpeechLMForASR(PreTrainedModel):
    config_class = SpeechLMConfig
    base_model_prefix = "speechlm"
    main_input_name = "input_features"
    _no_split_modules = []

    def __init__(self, config: SpeechLMConfig, tokenizer=None):
        super().__init__(config)
        with torch.device("cpu"):  # from_pretrained builds the modules on meta; the extractor's tables are data
            family = FAMILIES[config.encoder_family](_config(config.encoder), config.features)
        encoder = type(family.meta_encoder())(family.config)
        decoder = AutoModelForCausalLM.from_config(_config(config.decoder))
        if config.lora:
            from peft import get_peft_config, get_peft_model

            decoder = get_peft_model(decoder, get_peft_config(dict(config.lora)), autocast_adapter_dtype=True)
        s = config.speechlm
        projector = Projector(
            family.hidden_size, decoder.config.hidden_size, s["projector_hidden_dim"], s["projector_pool_stride"]
        )
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(config._name_or_path, config=config)
        self.tokenizer = tokenizer
        # inference only: the training loss (and its optional CUDA kernels) does not travel
        self.model = SpeechLM(
            SimpleNamespace(**s), encoder, projector, decoder, tokenizer, family, {}, bf16=config.bf16, loss=TokenLoss()
        )
        self.post_init()
        # dtypes as speechlm has them (docs/design.md): LoRA in fp32 beside a bf16 base, the projector in
        # its own dtype, and nothing else kept apart (speechlm casts Granite's BatchNorm with its encoder)
        keep = ["lora_A", "lora_B"] + (["projector"] if config.projector_dtype == "float32" else [])
        self._keep_in_fp32_modules, self._keep_in_fp32_modules_strict = set(), set(keep)
        # the decoder's own ties (tied input/output embeddings), which post_init leaves to nested models
        self.all_tied_weights_keys = self.get_expanded_tied_weights_keys(all_submodels=True)

    def _init_weights(self, module):
        pass  # every weight comes from the export; fresh modules keep their own init

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
        window_seconds: float = 20.0,
        strategy: str = DEFAULT_STRATEGY,
        batch_size: int = 16,
        max_new_tokens: int | None = None,
        threshold_db: float = THRESHOLD_DB,
        min_pause_seconds: float = MIN_PAUSE_SECONDS,
        merge_seconds: float = MERGE_SECONDS,
    ) -> list[str]:
        """16 kHz mono float clips of any length -> transcripts, exactly as `speechlm.transcribe` does
        (the same cut, speechlm_longform.py: by default at every pause, silence left out)."""
        limit = self.model.family.max_seconds
        window = min(window_seconds, limit) if limit else window_seconds
        return transcribe_long(
            lambda batch: self.model.transcribe(batch, max_new_tokens=max_new_tokens),
            waves,
            window,
            strategy=strategy,
            batch_size=batch_size,
            min_samples=self.model.features.min_samples,
            threshold_db=threshold_db,
            min_pause_seconds=min_pause_seconds,
            merge_seconds=merge_seconds,
        )
