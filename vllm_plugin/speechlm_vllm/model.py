"""The speechlm model under vLLM: the folder's encoder and projector (its own code) as the multimodal
tower, vLLM's own decoder class for the decoder (Llama/SmolLM2, Qwen3, Qwen3.5: whatever architecture
decoder/config.json names), the LoRA adapter merged into it as the weights stream in (weights.py).

A clip's path: processing.py computes its features and puts `audio_token_count` placeholders in its
prompt -> `embed_multimodal` runs the encoder and projector (as SpeechLM.encode_audio does, under the
same bf16 autocast) -> vLLM scatters the embeddings into the placeholder rows (the `<audio>` id is past
the decoder's vocabulary: vLLM masks it before the embedding lookup) -> the decoder generates, with the
stop rules of stops.py / logits.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.config.speech_to_text import SpeechToTextConfig
from vllm.inputs import TokensPrompt
from vllm.model_executor.models.interfaces import IsHybrid, SupportsMultiModal, SupportsTranscription
from vllm.model_executor.models.utils import init_vllm_registered_model, maybe_prefix
from vllm.multimodal import MULTIMODAL_REGISTRY

from . import stops
from .config import decoder_architecture
from .folder import SAMPLE_RATE, load
from .processing import SpeechLMDummyInputs, SpeechLMProcessingInfo, SpeechLMProcessor
from .weights import decoder_weights


class AudioTower(nn.Module):
    """The folder's encoder (family.pretrained_class, loaded as speechlm loads it) and projector."""

    def __init__(self, folder, decoder_hidden: int):
        super().__init__()
        self.folder = folder
        s, core = folder.settings, folder.core
        self.dtype = core.DTYPES[s.model_dtype]
        self.bf16 = bool(folder.config["bf16"])
        projector = core.Projector(
            folder.family.hidden_size, decoder_hidden, s.projector_hidden_dim, folder.pool_stride
        )
        self.projector = projector.to(core.DTYPES[folder.config.get("projector_dtype", "float32")])
        self.encoder = None  # loaded in load_weights, by the family's own from_pretrained

    def load_encoder(self, device) -> None:
        fam, path = self.folder.family, self.folder.path / self.folder.config["bases"]["encoder"]["folder"]
        attn = {"attn_implementation": fam.attn_implementation} if fam.attn_implementation else {}
        encoder = fam.pretrained_class.from_pretrained(
            str(path), config=fam.config, dtype=self.dtype, **attn, **fam.load_kwargs
        )
        encoder = fam.after_load(encoder, self.dtype).to(device)
        encoder.requires_grad_(False)
        fam.set_mode(encoder, False, False)
        self.encoder = encoder

    def _autocast(self, device: torch.device):
        if not self.bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)

    def forward(self, feats: list[torch.Tensor], samples: list[int]) -> list[torch.Tensor]:
        """Per clip its projected audio [n_i, D] (n_i: the family's audio_token_count)."""
        device = next(self.projector.parameters()).device
        width = max(f.shape[0] for f in feats)
        batch = torch.zeros(len(feats), width, feats[0].shape[-1], dtype=torch.float32, device=device)
        mask = torch.zeros(len(feats), width, dtype=torch.long, device=device)
        for i, f in enumerate(feats):
            batch[i, : f.shape[0]] = f.to(device, torch.float32)
            mask[i, : f.shape[0]] = 1
        with self._autocast(device):
            hidden, frames = self.folder.family.encode(self.encoder, batch.to(self.dtype), mask)
            proj = self.projector(hidden)
        lengths = self.folder.core.pooled_length(frames, self.folder.pool_stride).clamp_min(0).tolist()
        expected = [self.folder.audio_tokens(n) for n in samples]
        if lengths != expected:
            raise RuntimeError(
                f"the {self.folder.family.name} encoder emits {lengths} audio embeddings per clip but its family's "
                f"audio_token_count gives {expected} placeholders"
            )
        return [proj[i, :n] for i, n in enumerate(lengths)]


def _check_decoder_imports(folder, text_config) -> None:
    """vLLM's class for the decoder, imported here so that a failure names its cause (vLLM reports only
    that the architecture "failed to be inspected")."""
    from vllm import ModelRegistry

    arch = decoder_architecture(text_config)
    entry = ModelRegistry.models.get(arch)
    if entry is None:
        raise ValueError(f"{folder.path}: vLLM has no model class for the decoder's architecture {arch}")
    try:
        entry.load_model_cls()
    except ImportError as e:
        hint = ""
        if getattr(e, "name", "") == "torchvision":
            # vllm/model_executor/models/qwen3_5.py imports qwen3_vl.py, which imports transformers'
            # Qwen2-VL image processor, which imports torchvision at module level (Makefile, `vllm`)
            hint = (
                "; vLLM's Qwen3.5 code imports torchvision (through its Qwen3-VL module) even for text: "
                "install the torchvision build made for this torch (CPU: the PyTorch CPU index's +cpu build)"
            )
        raise ImportError(f"{folder.path}: vLLM's class for the decoder ({arch}) does not import: {e}{hint}") from e


def _clips(kwargs) -> tuple[list[torch.Tensor], list[int]] | None:
    feats, samples = kwargs.get("input_features"), kwargs.get("audio_samples")
    if feats is None:
        return None
    feats = list(feats) if isinstance(feats, (list, tuple)) else list(feats.unbind(0))
    samples = [int(s) for s in (samples.flatten().tolist() if torch.is_tensor(samples) else samples)]
    return feats, samples


@MULTIMODAL_REGISTRY.register_processor(
    SpeechLMProcessor, info=SpeechLMProcessingInfo, dummy_inputs=SpeechLMDummyInputs
)
class SpeechLMForVLLM(nn.Module, SupportsMultiModal, SupportsTranscription):
    supported_languages = {"en": "English"}  # what the prompt asks for is the folder's; others warn only

    @classmethod
    def get_placeholder_str(cls, modality: str, i: int) -> str | None:
        if modality.startswith("audio"):
            return "<audio>"
        raise ValueError("a speechlm model takes audio only")

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.folder = load(vllm_config.model_config.model)
        self.configure_mm_token_handling(config.text_config.vocab_size, [self.folder.audio_token_id])
        with self._mark_tower_model(vllm_config, "audio"):
            self.audio = AudioTower(self.folder, config.text_config.hidden_size)
        _check_decoder_imports(self.folder, config.text_config)
        with self._mark_language_model(vllm_config):
            self.language_model = init_vllm_registered_model(
                vllm_config=vllm_config, hf_config=config.text_config, prefix=maybe_prefix(prefix, "language_model")
            )
        self.make_empty_intermediate_tensors = getattr(self.language_model, "make_empty_intermediate_tensors", None)

    # ------------------------------------------------------------------ multimodal
    def embed_multimodal(self, **kwargs):
        clips = _clips(kwargs)
        if clips is None:
            return []
        return self.audio(*clips)

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None, **kwargs):
        if intermediate_tensors is not None:
            inputs_embeds = None
        return self.language_model.model(input_ids, positions, intermediate_tensors, inputs_embeds=inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.language_model.compute_logits(hidden_states)

    # ------------------------------------------------------------------ weights
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """The folder's model.safetensors (the projector, maybe trained embeddings) arrives in `weights`;
        the encoder and the decoder come from the folder's encoder/ and decoder/ (the adapter merged)."""
        projector, embed = {}, None
        for name, t in weights:
            if name.startswith("projector."):
                projector[name.removeprefix("projector.")] = t
            elif name == "embed_tokens.weight":
                embed = t
            else:
                raise ValueError(f"{self.folder.path}: unexpected tensor {name} in model.safetensors")
        self.audio.projector.load_state_dict(projector)
        device = next(self.audio.projector.parameters()).device
        self.audio.load_encoder(device)
        cfg = self.folder.config
        adapter = self.folder.path / "adapter" if cfg.get("lora") else None
        decoder = self.folder.path / cfg["bases"]["decoder"]["folder"]
        loaded = self.language_model.load_weights(decoder_weights(decoder, adapter, embed))
        encoder = {f"audio.encoder.{n}" for n, _ in self.audio.encoder.named_parameters()}
        return {f"language_model.{n}" for n in loaded} | {f"audio.projector.{n}" for n in projector} | encoder

    # ------------------------------------------------------------------ transcription (OpenAI endpoints)
    @classmethod
    def get_speech_to_text_config(cls, model_config, task_type: str) -> SpeechToTextConfig:
        # vLLM's own cut off (no energy window): server.py cuts every recording with the folder's long-form
        # cut; max_audio_clip_s is the window (vLLM joins several requests' texts only when it is set)
        folder = load(model_config.model)
        cls._folder_path = str(folder.path)  # the endpoint asks this once, before any request's language
        window = folder.long_form().window_seconds
        return SpeechToTextConfig(
            sample_rate=SAMPLE_RATE, max_audio_clip_s=int(window), min_energy_split_window_size=None
        )

    @classmethod
    def validate_language(cls, language: str | None) -> str | None:
        """OpenAI's `language` as speechlm's server takes it: a language the folder lists (`es`, `es-ES`,
        `spanish`), as its ISO 639-1 code; any other is refused naming what the model serves."""
        path = getattr(cls, "_folder_path", None)
        if language is None or path is None:
            return language
        return load(path).text.language_code(language, load(path).languages)  # ValueError: vLLM's 400

    @classmethod
    def get_generation_prompt(cls, stt_params) -> TokensPrompt:
        """speechlm's prompt for the request's language, task and `prompt` (context), a pinned language's
        opening written after it (Folder.asked_ids), as SpeechLM.transcribe asks a clip."""
        folder = load(stt_params.model_config.model)
        cls._folder_path = str(folder.path)
        task = "translate" if stt_params.task_type == "translate" else "transcribe"
        prompt, given = folder.asked_ids(1, stt_params.language, task, stt_params.request_prompt or None)
        return TokensPrompt(
            prompt_token_ids=prompt + given, multi_modal_data={"audio": (stt_params.audio, SAMPLE_RATE)}
        )

    @classmethod
    def get_num_audio_tokens(cls, audio_duration_s: float, stt_config, model_config) -> int | None:
        return load(model_config.model).audio_tokens(int(round(audio_duration_s * SAMPLE_RATE)))

    @classmethod
    def post_process_output(cls, text: str) -> str:
        path = getattr(cls, "_folder_path", None)
        return stops.cut_text(load(path), text) if path else text.strip()

    @classmethod
    def speechlm_windows(cls, model_config, wave) -> list:
        """The ranges of one recording that speechlm transcribes (server.py hands them to the engine)."""
        folder = load(model_config.model)
        return [wave[s:e] for s, e in folder.spans(wave, folder.long_form())]


class SpeechLMHybridForVLLM(SpeechLMForVLLM, IsHybrid):
    """The model with a hybrid decoder (attention and state-space layers: Qwen3.5's Gated DeltaNet).
    vLLM sizes and copies the state caches through these methods; each is the decoder class's own."""

    @classmethod
    def _decoder_cls(cls, vllm_config: VllmConfig):
        from vllm.model_executor.models import ModelRegistry

        model_config = vllm_config.model_config
        arch = decoder_architecture(model_config.hf_config.text_config)
        return ModelRegistry.resolve_model_cls(arch, model_config=model_config)[0]

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config: VllmConfig):
        return cls._decoder_cls(vllm_config).get_mamba_state_shape_from_config(vllm_config)

    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config: VllmConfig):
        return cls._decoder_cls(vllm_config).get_mamba_state_dtype_from_config(vllm_config)

    @classmethod
    def get_mamba_state_copy_func(cls):
        raise NotImplementedError("the copy functions are the decoder's: get_mamba_state_copy_funcs")

    def get_mamba_state_copy_funcs(self, mamba_types):
        return self.language_model.get_mamba_state_copy_funcs(mamba_types)
