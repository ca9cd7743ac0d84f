"""Per-device memory of a training step by the planner's model (the formula: speechlm.plan's docstring)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from speechlm.audio_checks import SAMPLE_RATE
from speechlm.config import Config, ConfigError
from speechlm.model.build import make_loss
from speechlm.model.ctc import chunk_frames
from speechlm.model.loss import LOGIT_BYTES  # noqa: F401  (re-exported)
from speechlm.plan.disk import GIB
from speechlm.plan.models import LINEAR_ATTN_CHUNK, Shapes, encoder_family

CUDA_OVERHEAD_GIB = 1.5
FRAGMENTATION = 0.10
USABLE_FRACTION = 0.92  # keep this much of a card's memory as the budget
MAX_CLIP_SECONDS = 19.0  # the shard step's cap (pitfall: OOM on long clips)
TEXT_TOKENS_PER_SECOND = 3.5  # English speech ~2.5 words/s at ~1.3 tokens/word, + <|im_end|>
PROMPT_TOKENS = 32  # chat template turns, the prompt, the newline


def worst_clip_seconds(cfg: Config, data: dict) -> float:
    """The longest clip a micro batch can hold: the manifests' (`disk.data_facts`, train clips already
    slowed down), else the shard step's cap slowed down by the smallest speed-perturbation factor
    (a 19 s clip at 0.9 is 21.1 s)."""
    return data["max_clip_seconds"] or MAX_CLIP_SECONDS * cfg.data.augment.max_stretch


@dataclass(frozen=True)
class GPU:
    name: str
    runpod_id: str
    memory_gib: float
    bf16_tflops: float  # dense peak, for MFU


CATALOG = [
    GPU("RTX 4090 24GB", "NVIDIA GeForce RTX 4090", 24, 165),
    GPU("L4 24GB", "NVIDIA L4", 24, 121),
    GPU("A40 48GB", "NVIDIA A40", 48, 150),
    GPU("RTX A6000 48GB", "NVIDIA RTX A6000", 48, 155),
    GPU("L40S 48GB", "NVIDIA L40S", 48, 362),
    GPU("RTX 6000 Ada 48GB", "NVIDIA RTX 6000 Ada Generation", 48, 364),
    GPU("A100 80GB", "NVIDIA A100 80GB PCIe", 80, 312),
    GPU("A100 SXM 80GB", "NVIDIA A100-SXM4-80GB", 80, 312),
    GPU("H100 PCIe 80GB", "NVIDIA H100 PCIe", 80, 756),
    GPU("H100 SXM 80GB", "NVIDIA H100 80GB HBM3", 80, 989),
    GPU("H100 NVL 94GB", "NVIDIA H100 NVL", 94, 835),
    GPU("RTX PRO 6000 96GB", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 96, 500),
    GPU("H200 141GB", "NVIDIA H200", 141, 989),
    GPU("B200 180GB", "NVIDIA B200", 180, 2250),
]


# --------------------------------------------------------------------------- memory


def zero_memory(
    frozen: int,
    trainable: int,
    *,
    stage: int,
    world: int,
    model_bytes: int = 2,
    compute_bytes: int = 2,
    offload: bool = False,
) -> dict:
    """Bytes per device for weights, gradients and AdamW states under ZeRO `stage` over `world`."""
    if stage not in (0, 1, 2, 3):
        raise ConfigError(f"deepspeed.zero_stage: must be 0, 1, 2 or 3, got {stage}")
    n = max(1, world)
    master = 4 if compute_bytes == 2 else 0  # fp32 master weights only when computing in 16 bit
    return {
        "frozen_weights": frozen * model_bytes / (n if stage == 3 else 1),
        "trainable_weights": trainable * compute_bytes / (n if stage == 3 else 1),
        "gradients": trainable * compute_bytes / (n if stage >= 2 else 1),
        "optimizer_states": 0.0 if offload else trainable * (master + 8) / (n if stage >= 1 else 1),
    }


def clip_tokens(cfg: Config, seconds: float, family=None) -> tuple[int, int]:
    """(sequence tokens, label tokens) of one clip of `seconds`; `family`: the run's encoder family."""
    family = family or encoder_family(cfg.model.audio_model_id)
    audio = family.audio_token_count(int(seconds * SAMPLE_RATE), cfg.model.projector_pool_stride)
    # a language a byte-level BPE writes in many tokens (kana ~4x English's: docs/languages.md) sizes the
    # worst clip when the config states the rates (model.tokens_per_second_by_language, from the shards)
    rates = (getattr(cfg.model, "tokens_per_second_by_language", None) or {}).values()
    labels = math.ceil(seconds * max([TEXT_TOKENS_PER_SECOND, *rates])) + 1
    return audio + PROMPT_TOKENS + labels, labels


def step_memory(
    cfg: Config, shapes: Shapes, *, batch: int, world: int, clip_seconds: float, device: str = "cuda"
) -> dict:
    """Peak bytes per device for a micro-batch of `batch` clips of `clip_seconds` (the worst case)."""
    if cfg.data.batching == "seconds" and cfg.data.batch_seconds > 0:
        batch = max(1, int(cfg.data.batch_seconds // clip_seconds))
    seq, labels = clip_tokens(cfg, clip_seconds, shapes.family)
    return batch_memory(
        cfg,
        shapes,
        world=world,
        batch=batch,
        seq_len=seq,
        label_tokens=batch * labels,
        audio_seconds=batch * clip_seconds,
        device=device,
    )


def batch_memory(
    cfg: Config,
    shapes: Shapes,
    *,
    world: int,
    batch: int,
    seq_len: int,
    label_tokens: int,
    audio_seconds: float,
    device: str = "cuda",
) -> dict:
    """Peak bytes per device for one step on `batch` sequences padded to `seq_len`, `label_tokens`
    label positions in all, and `audio_seconds` (padded) through the encoder."""
    tokens = batch * seq_len
    chunked = batch * -(-seq_len // LINEAR_ATTN_CHUNK) * LINEAR_ATTN_CHUNK
    t = cfg.training
    compute = 2 if t.bf16 else 4
    mem = zero_memory(
        shapes.frozen_params,
        shapes.trainable_params,
        stage=cfg.deepspeed.zero_stage,
        world=world,
        model_bytes=2 if (t.bf16 and cfg.model.model_dtype != "float32") else 4,
        compute_bytes=compute,
        offload=cfg.deepspeed.offload,
    )
    if t.gradient_checkpointing:
        per_token, per_chunked = shapes.ckpt_act_elems_per_token, shapes.ckpt_act_chunked_elems_per_token
        decoder = (tokens * per_token + chunked * per_chunked) * compute
    else:
        decoder = (tokens * shapes.act_elems_per_token + chunked * shapes.act_chunked_elems_per_token) * compute
    encoder = audio_seconds * shapes.enc_frames_per_second * shapes.enc_act_elems_per_frame * compute
    # a frozen encoder's transient is gone before the decoder's activations pile up; a trained
    # encoder's saved activations stay until the backward reaches them
    mem["activations"] = decoder + encoder if shapes.encoder_trained else max(decoder, encoder)
    # the configured loss states what its logits hold at the backward's peak
    mem["logits"] = make_loss(t).logits_bytes(label_tokens, shapes.vocab_size, compute)
    mem["ctc_head"] = ctc_head_bytes(cfg, shapes, audio_seconds, label_tokens)
    dynamic = sum(mem.values())
    mem["runtime_overhead"] = (CUDA_OVERHEAD_GIB * GIB + FRAGMENTATION * dynamic) if device == "cuda" else 0.0
    mem["total"] = dynamic + mem["runtime_overhead"]
    mem["tokens_per_device_batch"] = tokens
    return mem


def ctc_head_bytes(cfg: Config, shapes: Shapes, audio_seconds: float, label_tokens: int) -> float:
    """The CTC head's transient (speechlm.model.ctc), when it trains (warm start or `ctc_weight`): one
    chunk of frames' fp32 logits over the vocabulary at a time (and their softmax in the recomputing
    backward), the frames' log-probabilities over the batch's own tokens and the blank (with their
    gradient), the frames as fp32 unit vectors, and under ZeRO-3 the gathered embedding table (read in
    its own dtype: no fp32 copy of it)."""
    t = cfg.training
    if (t.ctc_weight <= 0 and t.ctc_warmup_steps <= 0) or shapes.family is None:
        return 0.0
    rate = shapes.family.audio_token_count(SAMPLE_RATE * 10, cfg.model.projector_pool_stride) / 10
    frames = audio_seconds * rate
    vocab = shapes.vocab_size
    chunk = 2 * min(frames, chunk_frames(vocab)) * (vocab + 1) * 4
    picked = 3 * frames * (min(label_tokens, vocab) + 1) * 4
    compute = 2 if (t.bf16 and cfg.model.model_dtype != "float32") else 4
    table = vocab * shapes.decoder_hidden * compute if cfg.deepspeed.zero_stage == 3 else 0  # gathered
    return chunk + picked + 2 * frames * shapes.decoder_hidden * 4 + table


def fit_batch(cfg: Config, shapes: Shapes, gpu: GPU, *, world: int, clip_seconds: float) -> tuple[int, int] | None:
    """Largest per-device batch (and accumulation) that fits `gpu` and keeps the effective batch."""
    t = cfg.training
    effective = t.per_device_train_batch_size * t.gradient_accumulation_steps * world
    budget = gpu.memory_gib * GIB * USABLE_FRACTION
    b = t.per_device_train_batch_size * t.gradient_accumulation_steps
    while b >= 1:
        fits = step_memory(cfg, shapes, batch=b, world=world, clip_seconds=clip_seconds)["total"] <= budget
        if effective % (b * world) == 0 and fits:
            return b, effective // (b * world)
        b = b // 2 if b > 1 else 0
    return None
