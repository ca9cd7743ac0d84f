"""The typed config schema: one dataclass per recipe section, and Config.validate()'s cross-field checks.

ConfigError lives in errors.py (re-exported here) because validate() and augment.py raise it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from speechlm.config.augment import AugmentConfig
from speechlm.config.errors import ConfigError


@dataclass
class ModelConfig:
    # the encoder family (speechlm.model.encoders) comes from this checkpoint's model_type:
    # Granite Speech 5 (granite_speech5_ctc) or Whisper (whisper)
    audio_model_id: str = "ibm-granite/granite-speech-5.0-470m-turboctc-nc"
    text_model_id: str = "Qwen/Qwen3.5-2B"
    model_dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    projector_dtype: Literal["bfloat16", "float32"] = "float32"
    projector_pool_stride: int = 1
    projector_hidden_dim: int = 4096
    calibrate_projector: bool = True
    use_lora: bool = True
    lora_rank: int = 64
    lora_alpha: int = 64
    lora_dropout: float = 0.0
    lora_target_modules: Any = "all-linear"
    audio_token: str = "<audio>"
    prompt: str = "Transcribe the audio."
    # languages and tasks (docs/languages.md): a clip's prompt is its task's template (transcribe: the
    # prompt above) plus " The speech is in <language>." when its language is given; prompt templates
    # of tasks of one's own ("{target}": the target language's name), beside the registered ones
    task_prompts: dict[str, str] = field(default_factory=dict)
    # the languages the model serves (ISO 639-1; the card's `language:` list, the server's `language`
    # field); empty: English only
    languages: list[str] = field(default_factory=list)
    # detect-or-pin: the answer opens with the spoken language ("language Spanish: ..."); a caller pins a
    # language by writing the opening, or lets the model detect it
    answer_language: bool = False
    # the share of training clips whose prompt leaves their language out, so the model learns to detect
    # it (a fixed choice per clip id)
    language_dropout: float = 0.0
    # null: the chat template's default system turn, if it has one; a string (even ""): that
    # system turn instead (SmolLM2's default adds 16 tokens to every clip)
    system_prompt: str | None = None
    trust_remote_code: bool = False
    max_new_tokens: int = 128  # the ceiling of the per-clip budget below
    # per clip, at most tokens_per_second x its seconds + new_tokens_margin new tokens (<= 0: always
    # max_new_tokens); English speech runs ~3-4 tokens per second, so 8 leaves twice that
    tokens_per_second: float = 8.0
    # the same per spoken language (ISO 639-1 -> rate): a character language costs far more tokens a
    # second in a byte-level BPE. Empty: measured from the training shards at the start of a run of a
    # model that lists `languages` (speechlm.data.token_rates); a clip of a language not listed here,
    # or of one the model detects, gets the largest rate
    tokens_per_second_by_language: dict[str, float] = field(default_factory=dict)
    new_tokens_margin: int = 8
    # stop a clip whose last tokens repeat one n-gram (n <= loop_max_ngram) loop_min_repeats times,
    # keeping one copy (0: off)
    loop_max_ngram: int = 8
    loop_min_repeats: int = 4
    # fine-tune from a trained speechlm model: a checkpoint, run, final or exported folder, or a Hub id.
    # Its projector, LoRA and any trained encoder/decoder parts are loaded onto this config's bases
    # (which must be the folder's); the optimizer, schedule and data position start fresh
    # (speechlm.train.init_from). Never recorded in a model folder.
    init_from: str | None = None


@dataclass
class DataSet:
    """One built shard set (the output folder of `python -m speechlm.shard`)."""

    path: str = ""
    weight: float = 1.0
    split: str = "train"
    # the mix within the set: a clip's weight is `weight` x its language's factor x its task's (a
    # language or task not named: 1); needs clips that state them (manifest.json's shard entries)
    languages: dict[str, float] = field(default_factory=dict)
    tasks: dict[str, float] = field(default_factory=dict)


@dataclass
class DataConfig:
    # shard recipe to build on the fly when a shard set is missing (e.g. shards/synthetic.yaml)
    recipe: str | None = None
    train: list[DataSet] = field(default_factory=list)
    eval: list[DataSet] = field(default_factory=list)
    max_eval_samples_per_dataset: int = 200
    batching: Literal["clips", "seconds"] = "clips"
    # with batching=seconds: total audio seconds per batch (per device)
    batch_seconds: float = 0.0
    # what a shuffled block's clips are sorted by before batches are cut: their durations, or the decoder
    # tokens each is estimated to take (audio placeholders + its language's text tokens per second):
    # for mixes of languages whose answers cost unlike tokens per second (speechlm.data.token_rates)
    bucket_by: Literal["seconds", "tokens"] = "seconds"
    shuffle_shards_per_block: int = 4
    num_workers: int = 2
    prefetch_factor: int = 2
    # shard sets at a URL (s3://, gs://, https://...; see speechlm/data/remote.py): a local folder
    # that keeps whole downloaded tars, capped at cache_max_gb (None: stream the tars, no copy)
    cache_dir: str | None = None
    cache_max_gb: float = 50.0
    # per request: connect/read timeout; transient failures retried io_retries times, waiting
    # io_backoff_s, then twice as long each time (30 s at most); then the run stops with an error
    io_timeout_s: float = 60.0
    io_retries: int = 5
    io_backoff_s: float = 1.0
    # on-the-fly training augmentation (speechlm/config/augment.py); eval never augments
    augment: AugmentConfig = field(default_factory=AugmentConfig)


@dataclass
class TrainingConfig:
    output_dir: str = "outputs"
    run_name: str | None = None
    seed: int = 44
    learning_rate: float = 1e-3  # projector
    decoder_learning_rate: float = 1e-4  # LoRA adapters / decoder
    encoder_learning_rate: float = 1e-5  # only used if the encoder is unfrozen
    projector_weight_decay: float = 0.01
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    warmup_steps: int = 1000
    lr_scheduler_type: Literal["cosine", "linear", "constant"] = "cosine"
    max_grad_norm: float = 1.0
    # "auto": micro batch x accumulation picked for the device so that each optimizer step sees
    # clips_per_step_per_device clips (speechlm.train.autobatch); a number: exactly that micro batch
    per_device_train_batch_size: int | Literal["auto"] = 256
    clips_per_step_per_device: int = 256
    per_device_eval_batch_size: int = 128
    gradient_accumulation_steps: int = 1
    num_train_epochs: float = 2
    max_steps: int = -1
    eval_steps: int = 2000
    save_steps: int = 2000
    logging_steps: int = 10
    save_total_limit: int | None = 3
    resume_from_checkpoint: str | None = None
    push_to_hub: bool = False
    final_model: bool = True  # at the end of a run, the self-contained model folder in <run>/final
    hub_model_id: str | None = None
    hub_private_repo: bool = True
    hub_retry_backoff_s: float = 5.0  # a failed upload is retried after this, then twice as long
    report_to: Literal["wandb", "none"] = "none"
    wandb_project: str = "speechlm"
    bf16: bool = True
    attn_implementation: str = "auto"
    # the loss over label positions (speechlm.model.loss.LOSSES): chunked_ce (default; Liger's fused
    # kernel on CUDA when installed) or full_ce (every label logit at once)
    loss: str = "chunked_ce"
    gradient_checkpointing: bool = False
    # > 0: keep each clip's frozen-encoder output in host memory, up to this many GB, and reuse it when the
    # clip comes again (a run of several epochs; speechlm.model.encoder_cache). Needs a frozen encoder, no
    # augmentation and ZeRO stage < 3
    encoder_cache_gb: float = 0.0
    freeze_audio_encoder: bool = True
    freeze_language_model: bool = True
    freeze_text_embed_tokens: bool = True
    freeze_projector: bool = False
    max_nonfinite_in_a_row: int = 10
    # the first N optimizer steps train the projector alone by CTC over the decoder's vocabulary
    # (speechlm.model.ctc): no decoder forward, a fraction of an LM step's cost
    ctc_warmup_steps: int = 0
    # after the warm start, the CTC head keeps training beside the LM loss, weighted by this: it is what
    # word timestamps are aligned on (speechlm.model.align); 0 turns it off
    ctc_weight: float = 0.3
    # at every evaluation after the CTC warm start, also transcribe this many clips of each eval set
    # and log WER per part named in the clip ids (speechlm.scoring.by_part: eval/wer/<part>, eval/empty_share/<part>)
    eval_transcribe_clips: int = 0
    # a grad norm above this is logged as a warning, except in the first steps of each phase (the CTC
    # warm start, the LM phase), where a fresh projector or fresh adapters have large ones by nature
    grad_norm_spike: float = 100.0


@dataclass
class DeepSpeedConfig:
    zero_stage: int = 2
    config: str | None = None  # path; default ds_configs/zero{stage}.json (zero3_offload with offload)
    offload: bool = False


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    deepspeed: DeepSpeedConfig = field(default_factory=DeepSpeedConfig)

    def validate(self) -> None:
        """Cross-field checks that need no files or models, so every CLI fails in seconds, not after
        a model is built (`load` calls this). File-backed checks (ds JSON, shards) live with their readers."""
        for key, v in self._positive().items():
            if not v > 0:
                raise ConfigError(f"{key}: must be > 0, got {v}")
        for key, v in self._non_negative().items():
            if not v >= 0:
                raise ConfigError(f"{key}: must be >= 0, got {v}")
        self._check_optimization()
        self._check_encoder_cache()
        self._check_languages()
        self.data.augment.validate("data.augment")
        self._check_datasets()

    def _check_languages(self) -> None:
        m = self.model
        if not 0 <= m.language_dropout <= 1:
            raise ConfigError(f"model.language_dropout: a share in [0, 1], got {m.language_dropout}")
        bad = {k: v for k, v in m.tokens_per_second_by_language.items() if not isinstance(v, (int, float)) or v <= 0}
        if bad:
            raise ConfigError(f"model.tokens_per_second_by_language: rates must be numbers > 0, got {bad}")
        for name, template in m.task_prompts.items():
            if not isinstance(template, str) or not template.strip():
                raise ConfigError(f"model.task_prompts.{name}: a prompt template (text), got {template!r}")
        for k, ds in enumerate(self.data.train):
            for what, table in (("languages", ds.languages), ("tasks", ds.tasks)):
                bad = {x: f for x, f in table.items() if not isinstance(f, (int, float)) or f < 0}
                if bad:
                    raise ConfigError(f"data.train[{k}].{what}: factors must be numbers >= 0, got {bad}")

    def _positive(self) -> dict:
        """Dotted key -> value of the settings that must be > 0 under this config (which batch size
        counts depends on the batching mode; the LoRA rank only with LoRA on)."""
        t, d, m = self.training, self.data, self.model
        positive = {
            "training.gradient_accumulation_steps": t.gradient_accumulation_steps,
            "training.per_device_eval_batch_size": t.per_device_eval_batch_size,
            "data.prefetch_factor": d.prefetch_factor,
            "data.shuffle_shards_per_block": d.shuffle_shards_per_block,
            "model.projector_pool_stride": m.projector_pool_stride,
            "model.projector_hidden_dim": m.projector_hidden_dim,
            "training.max_nonfinite_in_a_row": t.max_nonfinite_in_a_row,
            "data.io_timeout_s": d.io_timeout_s,
            "data.cache_max_gb": d.cache_max_gb,
        }
        if m.use_lora:
            positive["model.lora_rank"] = m.lora_rank
        key, value = self._micro_batch()
        positive[key] = value
        return positive

    def _micro_batch(self) -> tuple[str, Any]:
        """The (key, value) that sets the micro batch; raises when per_device_train_batch_size=auto
        meets a setting it overrides."""
        t, d = self.training, self.data
        if t.per_device_train_batch_size == "auto":
            if d.batching != "clips":
                raise ConfigError(
                    "training.per_device_train_batch_size=auto: needs data.batching=clips "
                    "(with batching=seconds, data.batch_seconds sets the micro batch)"
                )
            if t.gradient_accumulation_steps != 1:
                raise ConfigError(
                    "training.gradient_accumulation_steps: chosen by per_device_train_batch_size=auto "
                    f"(got {t.gradient_accumulation_steps}); leave it at 1, or give a number batch size"
                )
            return "training.clips_per_step_per_device", t.clips_per_step_per_device
        if d.batching == "clips":
            return "training.per_device_train_batch_size", t.per_device_train_batch_size
        return "data.batch_seconds", d.batch_seconds

    def _non_negative(self) -> dict:
        """Dotted key -> value of the settings that must be >= 0."""
        t, d = self.training, self.data
        return {
            "training.learning_rate": t.learning_rate,
            "training.decoder_learning_rate": t.decoder_learning_rate,
            "training.encoder_learning_rate": t.encoder_learning_rate,
            "training.warmup_steps": t.warmup_steps,
            "training.ctc_warmup_steps": t.ctc_warmup_steps,
            "training.ctc_weight": t.ctc_weight,
            "training.encoder_cache_gb": t.encoder_cache_gb,
            "training.eval_transcribe_clips": t.eval_transcribe_clips,
            "training.weight_decay": t.weight_decay,
            "training.max_grad_norm": t.max_grad_norm,
            "training.eval_steps": t.eval_steps,
            "training.save_steps": t.save_steps,
            "training.logging_steps": t.logging_steps,
            "data.num_workers": d.num_workers,
            "data.max_eval_samples_per_dataset": d.max_eval_samples_per_dataset,
            "data.io_retries": d.io_retries,
            "data.io_backoff_s": d.io_backoff_s,
        }

    def _check_optimization(self) -> None:
        """Precision against the model dtype, a run length, and Adam's betas."""
        t, m = self.training, self.model
        if t.bf16 and m.model_dtype != "bfloat16":
            # DeepSpeed's bf16 mode stores every parameter in bf16 (trainables keep fp32 masters in the optimizer)
            raise ConfigError(
                f"model.model_dtype: training.bf16=true trains in DeepSpeed's bf16 mode, which stores "
                f"the model in bfloat16; got {m.model_dtype!r} (set model.model_dtype=bfloat16, or "
                f"training.bf16=false model.model_dtype=float32 for fp32)"
            )
        if t.max_steps <= 0 and not t.num_train_epochs > 0:
            raise ConfigError(
                f"training.num_train_epochs: must be > 0 when training.max_steps <= 0, got {t.num_train_epochs}"
            )
        if not (0 <= t.adam_beta1 < 1 and 0 <= t.adam_beta2 < 1):
            raise ConfigError(f"training.adam_beta1/adam_beta2: must be in [0, 1), got {t.adam_beta1}, {t.adam_beta2}")

    def _check_encoder_cache(self) -> None:
        """training.encoder_cache_gb only where the encoder's output is a function of the clip alone."""
        if not self.training.encoder_cache_gb > 0:
            return
        why = (
            "training.freeze_audio_encoder=false: a trained encoder answers differently every step"
            if not self.training.freeze_audio_encoder
            else "data.augment.enabled=true: an augmented clip's features differ every epoch"
            if self.data.augment.enabled
            else "deepspeed.zero_stage=3: its encoder weights are gathered by collectives every rank must join"
            if self.deepspeed.zero_stage == 3
            else None
        )
        if why:
            raise ConfigError(
                f"training.encoder_cache_gb: needs the encoder's output to be the clip's alone; {why} (set it to 0)"
            )

    def _check_datasets(self) -> None:
        """Every train and eval shard set names a folder and has a weight >= 0."""
        d = self.data
        for i, s in enumerate(d.train + d.eval):
            key = f"data.train[{i}]" if i < len(d.train) else f"data.eval[{i - len(d.train)}]"
            if not s.path:
                raise ConfigError(f"{key}.path: empty (give the folder of a built shard set)")
            if not s.weight >= 0:
                raise ConfigError(f"{key}.weight: must be >= 0, got {s.weight}")
