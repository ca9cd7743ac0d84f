"""The training loop: the same code under `deepspeed`, `torchrun` and plain `python` (world size 1).

Exit status: 0 done; 2 config error; 3 stopped after `max_nonfinite_in_a_row` non-finite steps;
128+signal (143 SIGTERM, 138 SIGUSR1) after a pre-emption checkpoint, so a Slurm script can requeue.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import time
from datetime import datetime
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import set_seed

from speechlm import config as config_mod
from speechlm.config import Config, ConfigError, TrainingConfig
from speechlm.data import ctc_fit, token_rates
from speechlm.data.augment import Augmenter
from speechlm.model.build import build_model, make_loss, trainable_parts
from speechlm.model.encoders import family_for
from speechlm.model.folder.io import save_pretrained
from speechlm.model.kernels import log_kernels
from speechlm.model.parts import preflight
from speechlm.train import autobatch, init_from, optim, runfolder, sanity, step_stats
from speechlm.train import checkpoint as ckpt_mod
from speechlm.train import engine as engine_mod
from speechlm.train import final as final_mod
from speechlm.train.inputs import check_encoder_limits, ensure_shards, make_loaders
from speechlm.train.metrics import Metrics, peak_memory_gb, setup_logging
from speechlm.train.run import RunSettings, resolve_run, with_training
from speechlm.train.signals import StopFlag, to_device

log = logging.getLogger("speechlm.train")

EXIT_NONFINITE = 3
SKIP_KEYS = ("tar_errors", "missing_clips", "bad_clips", "empty_batches")  # speechlm.data reader stats


class Trainer:
    def __init__(self, cfg: Config, overwrite: bool = False):
        self.config = cfg  # as given: never changed (the run trains with `self.cfg`, its resolved copy)
        self.settings: RunSettings | None = None  # decided once, in setup
        self.overwrite = overwrite  # `speechlm train --overwrite`: start over in a run folder that holds a run

    @property
    def cfg(self) -> Config:
        """The config the run trains with: the resolved copy once set-up has decided the run."""
        return self.config if self.settings is None else self.settings.cfg

    @property
    def t(self) -> TrainingConfig:
        return self.cfg.training

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        """Check the config, build the shards, decide the run (`self.settings`, read-only from then on),
        build the model, loaders and engine from it, restore a checkpoint, open the run's outputs."""
        engine_mod.default_launcher_env()
        self.check_config()  # resolves the run's encoder family once: self.family
        ensure_shards(self.config)  # before any collective: building data must not time out NCCL (pitfall 7)
        check_encoder_limits(self.config, self.family)  # e.g. Whisper's 30 s, from the manifests: before any model
        self.rank, self.world, self.device = engine_mod.init_distributed()
        setup_logging(self.rank)
        set_seed(self.config.training.seed)
        self.run_dir = self._run_dir()
        self.card_info, self.last_eval = final_mod.card_info(self.config, self.run_dir), {}
        self.ckpt = ckpt_mod.CheckpointManager(
            self.run_dir,
            self.config.training.save_total_limit,
            export=lambda model, path: save_pretrained(model, path, card=self.card()),
        )
        # a folder that holds a run: resume it (same config), or stop (speechlm.train.runfolder)
        resume = self.ckpt.resolve(runfolder.claim(self.config, self.run_dir, self.overwrite, self.rank))
        if dist.is_initialized():
            dist.barrier()  # rank 0 may have cleared the folder: nobody opens its files before that
        # the run's settings in three stages (speechlm.train.run), each a new value: before the model,
        # after the CUDA probe of the auto batch, after the loaders (steps per epoch, total steps)
        run = self._resolve(resume)
        self.model = build_model(run.cfg, family=self.family)
        token_rates.fill(self.model, run.cfg.data.train)  # a multilingual model's budget per language
        t = run.cfg.training
        if self.rank == 0 and (t.ctc_warmup_steps > 0 or t.ctc_weight > 0):
            ctc_fit.check(self.model, run.cfg.data.train)  # logs the clips CTC cannot align, per language
        exact = None
        if self.init is not None and resume is None:  # a resumed run has its trained weights in the checkpoint
            exact = init_from.load_into(self.model, *self.init)
        if run.auto is not None:  # on CUDA: the worst case once, halving on OOM, before the engine exists
            run = run.with_pick(autobatch.probe(run.cfg, self.model, run.auto, self.device, self.world))
        self.train_loader, self.eval_loader = make_loaders(run.cfg, self.model, self.rank, self.world)
        self.settings = run.with_steps(self.train_loader.steps_per_epoch)
        sanity.warn_schedule(self.settings.cfg, self.settings.total_steps)
        self._build_engine()
        if exact is not None:
            init_from.set_masters(self.model, exact)
        self._restore(resume)
        self._open_outputs()

    def _resolve(self, resume: Path | None) -> RunSettings:
        """Stage 1 of the run's settings for this device, world and resumed checkpoint."""
        saved = self.ckpt.read_state(resume) if resume is not None else None
        auto = self.config.training.per_device_train_batch_size == "auto"
        name = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else self.device.type
        return resolve_run(
            self.config,
            world=self.world,
            device_name=name,
            bf16_supported=engine_mod.bf16_supported(self.device),
            saved=saved,
            saved_path=resume,
            device_memory=autobatch.device_memory_gib() if auto else None,
            family=self.family,
        )

    def _build_engine(self) -> None:
        s = self.settings
        self.optimizer = optim.build_optimizer(self.model, s.cfg.training)
        self.scheduler = optim.build_scheduler(self.optimizer, s.cfg.training, s.total_steps)
        self.engine = engine_mod.build_engine(self.model, self.optimizer, self.scheduler, s.ds_config)
        log_kernels(self.model, self.device)  # after the engine: ZeRO-3 partitioning decides the loss kernel

    def _restore(self, resume: Path | None) -> None:
        """Step, epoch, reader position and RNG from the checkpoint resumed (the engine loads its own state)."""
        self.step, self.epoch = 0, 0
        self.resumed = resume is not None
        if resume is None:
            return
        state, mine = self.ckpt.load(resume, self.engine)
        self.step = state["step"]
        self.train_loader.load_state_dict(mine["reader"])
        self.epoch = self.train_loader.epoch
        ckpt_mod.set_rng_state(mine["rng"])
        log.info("resumed from %s at step %d (epoch %d)", resume, self.step, self.epoch)
        runfolder.warn_if_other_data(state.get("config", {}), self.config, resume, self.step)

    def _open_outputs(self) -> None:
        """The Hub uploader, config.yaml (the resolved config), metrics, the clip ledger, the run's first lines."""
        s, t = self.settings, self.settings.cfg.training
        self.hub = None
        if t.push_to_hub and self.rank == 0:  # check_config made sure hub_model_id is set
            from speechlm.train.hub import HubUploader  # huggingface_hub's upload machinery: only when pushing

            self.hub = HubUploader(t.hub_model_id, private=t.hub_private_repo, backoff_s=t.hub_retry_backoff_s)
        if self.rank == 0:
            config_mod.dump(s.cfg, self.run_dir / "config.yaml")
        self.metrics = Metrics(s.cfg, self.run_dir, self.rank, s.total_steps, self.step)
        self.ledger = open(self.run_dir / f"clips.rank{self.rank}.jsonl", "a")
        if s.elastic_line:
            self.metrics.line(s.elastic_line)
        self.metrics.line(
            f"run {self.run_dir}: world {s.world} x micro batch {s.micro} x accumulation {s.accumulation} = "
            f"effective batch {s.effective_batch}; {s.total_steps} steps ({s.steps_per_epoch}/epoch); "
            f"ZeRO-{s.cfg.deepspeed.zero_stage}"
            + (f"; per_device_train_batch_size=auto: {s.auto.describe()}" if s.auto else "")
        )
        self.metrics.log(
            self.step, {"effective_batch_size": s.effective_batch, "world_size": s.world, "total_steps": s.total_steps}
        )

    def check_config(self) -> None:
        """Mistakes that need a file (ds JSON) or the model package, found before shards, process
        group or model are built, so a bad command fails in seconds with one line."""
        cfg, t = self.config, self.config.training
        if not cfg.data.train:
            raise ConfigError("data.train: no shard sets given")
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if t.per_device_train_batch_size == "auto":
            autobatch.device_memory_gib()  # the memory to plan for must be known
            # the ds JSON checked with a batch auto could pick
            provisional = with_training(
                cfg, per_device_train_batch_size=1, gradient_accumulation_steps=t.clips_per_step_per_device
            )
            engine_mod.build_ds_config(provisional, world)
        else:
            engine_mod.build_ds_config(cfg, world)
        trainable_parts(cfg.model, t)
        make_loss(t)
        if t.resume_from_checkpoint not in (None, "auto"):  # an explicit path must hold a checkpoint
            ckpt_mod.CheckpointManager(".").resolve(t.resume_from_checkpoint)
        sanity.check_hub(cfg)
        if t.push_to_hub and not t.hub_model_id:
            raise ConfigError("training.hub_model_id: required when training.push_to_hub is true")
        if cfg.data.augment.enabled:  # noise/RIR folders listed, codecs checked: a ConfigError naming the key
            Augmenter(cfg.data.augment, seed=t.seed)
        self.init = init_from.check(cfg) if cfg.model.init_from else None  # (folder, its config), checked
        try:
            self.family = family_for(cfg.model.audio_model_id, cfg.model.trust_remote_code)  # the run's, once
            preflight(cfg.model, self.family)  # every pretrained weight accounted for, on the meta device
        except ConfigError as e:
            raise sanity.explain_offline(e, cfg) from None

    def _run_dir(self) -> Path:
        name = self.config.training.run_name
        if not name:  # one dated name for all ranks
            box = [datetime.now().strftime("run-%Y%m%d-%H%M%S")]
            if self.world > 1:
                dist.broadcast_object_list(box, src=0)
            name = box[0]
        d = Path(self.config.training.output_dir) / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    # ------------------------------------------------------------------ the loop
    def run(self) -> int:
        self.setup()
        stop = StopFlag()
        try:
            return self._train(stop)
        except BaseException as e:  # a crash: the checkpoints hold the run, the last line says how to export it
            if self.rank == 0:
                final_mod.how_to_export(self.run_dir, self.ckpt, f"crashed at step {self.step} ({type(e).__name__})")
            raise
        finally:
            stop.restore()

    def _train(self, stop: StopFlag) -> int:
        t, total = self.t, self.settings.total_steps
        code = 0
        nonfinite_in_a_row = 0
        last_saved = self.step if self.resumed else -1
        batches = iter(self.train_loader)
        self.engine.train()
        while self.step < total:
            t0 = time.perf_counter()
            stats, ids, batches = self._accumulate(batches)
            signum = step_stats.reduce(stats, stop.signum, self.world)  # sums over ranks, in place
            applied = self.engine.was_step_applied()
            self.step += 1
            dt = time.perf_counter() - t0
            if stats[step_stats.NONFINITE] > 0 or not applied:
                nonfinite_in_a_row += 1
                step_stats.report_nonfinite(self.metrics, self.step, ids, nonfinite_in_a_row, self.world)
                if nonfinite_in_a_row >= t.max_nonfinite_in_a_row:
                    self.metrics.line(
                        f"stopping: {nonfinite_in_a_row} non-finite steps in a row "
                        f"(training.max_nonfinite_in_a_row={t.max_nonfinite_in_a_row})"
                    )
                    code = EXIT_NONFINITE
                    break
            else:
                nonfinite_in_a_row = 0
            self._log_step(stats, dt, applied)
            if t.eval_steps > 0 and self.step % t.eval_steps == 0 and self.step < total:
                self.evaluate()
            if signum:
                self.metrics.line(f"signal {signal.Signals(signum).name}: saving at step {self.step}, then exiting")
                code = 128 + signum if self.save() else 1
                break
            if t.save_steps > 0 and self.step % t.save_steps == 0 and self.step < total:
                self.save()
                last_saved = self.step
        ended = None if code == 0 else f"stopped early at step {self.step} (exit {code})"
        if code == 0:
            self.evaluate()
            if last_saved != self.step:
                self.save()
            if t.final_model and not self.save_final():
                ended = "the final model folder was not written"
        self.finish()
        if ended and self.rank == 0:  # the run's last line: where its model is and how to export it
            final_mod.how_to_export(self.run_dir, self.ckpt, ended)
        return code

    def _accumulate(self, batches):
        """One optimizer step: `accumulation` micro batches forward, backward and DeepSpeed's step (which
        applies the update on the last). Returns this rank's stats (speechlm.train.step_stats: loss, micro
        batches, non-finite micro batches, tokens, clips, audio seconds), the clip ids trained on, and the
        batch iterator."""
        stats = step_stats.zeros()
        ids = []
        # the first ctc_warmup_steps teach the projector alone, by CTC (speechlm.model.ctc)
        objective = "ctc" if self.step < self.t.ctc_warmup_steps else "lm"
        for micro in range(self.settings.accumulation):
            batch, batches = self._next_batch(batches)
            real = [i for i, w in zip(batch["ids"], batch["weight"].tolist()) if w > 0]
            ids.extend(real)
            self.ledger.write(
                json.dumps({"step": self.step, "micro": micro, "epoch": self.train_loader.epoch, "ids": real}) + "\n"
            )
            out = self.engine(**to_device(batch, self.device), objective=objective)
            self.engine.backward(out.loss)
            self.engine.step()
            audio = float(batch["audio_seconds"][batch["weight"] > 0].sum())
            stats += step_stats.micro_row(float(out.loss.detach().float()), float(out.num_tokens), len(real), audio)
        self.ledger.flush()
        return stats, ids, batches

    def _next_batch(self, batches):
        try:
            return next(batches), batches
        except StopIteration:  # the loader has moved itself to the next epoch
            self.epoch = self.train_loader.epoch
            batches = iter(self.train_loader)
            return next(batches), batches

    # ------------------------------------------------------------------ pieces
    def _log_step(self, stats: torch.Tensor, dt: float, applied: bool) -> None:
        t = self.t
        grad_norm = self.engine.get_global_grad_norm() if applied else None
        row = step_stats.figures(stats, dt, grad_norm, self.optimizer.param_groups, self.epoch, applied)
        grad_norm = row["train/grad_norm"]
        spike = math.isfinite(grad_norm) and grad_norm > t.grad_norm_spike
        if applied and spike and not sanity.settling(self.step, t.ctc_warmup_steps):
            log.warning(
                "step %d: grad norm %.1f above training.grad_norm_spike=%.1f", self.step, grad_norm, t.grad_norm_spike
            )
        self.metrics.progress(self.step, row["train/loss"], row["train/learning_rate"])
        if self.step % max(1, t.logging_steps) and self.step != self.settings.total_steps and self.step != 1:
            return
        cache = self.model.encoder_cache.figures() if self.model.encoder_cache is not None else {}
        self.metrics.log(self.step, {**row, **cache, "perf/peak_memory_gb": peak_memory_gb(self.device)})

    @torch.no_grad()
    def evaluate(self) -> float | None:
        if self.eval_loader is None:
            return None
        self.engine.eval()
        tot = torch.zeros(2, dtype=torch.float64)  # loss x tokens, tokens
        for batch in self.eval_loader:
            out = self.engine(**to_device(batch, self.device))
            n = float(out.num_tokens)
            if n > 0:
                tot += torch.tensor([float(out.loss) * n, n], dtype=torch.float64)
        if self.world > 1:
            dist.all_reduce(tot)
        self.engine.train()
        loss = float(tot[0] / tot[1]) if tot[1] > 0 else float("nan")
        self.metrics.log(self.step, {"eval/loss": loss})
        self.last_eval = {"step": self.step, "loss": loss, "sets": [Path(d.path).name for d in self.cfg.data.eval]}
        self.metrics.line(f"eval step {self.step}: loss {loss:.4f} over {int(tot[1])} tokens")
        # WER per part of the eval split (speechlm.scoring.by_part); not while the CTC warm start
        # runs: the adapters have not seen a transcript yet, so generation runs to its budget
        if self.t.eval_transcribe_clips > 0 and self.step > self.t.ctc_warmup_steps:
            from speechlm.train.transcribe_eval import transcribe_eval  # generation, only when asked for

            scores, line = transcribe_eval(self.model, self.cfg)
            self.metrics.log(self.step, scores)
            self.last_eval["scores"] = scores
            self.metrics.line(f"eval step {self.step}: {line}")
        return loss

    def save(self) -> bool:
        s = self.settings
        batch = {k: getattr(s, k) for k in ("micro", "accumulation", "world", "configured_accumulation")}
        trainer_state = {
            "epoch": self.epoch,
            "total_steps": s.total_steps,
            "batch": batch,
            "scheduler": self.scheduler.state_dict(),
            "config": config_mod.to_dict(s.cfg),
        }
        local = {"reader": self.train_loader.state_dict(), "rng": ckpt_mod.rng_state()}
        path = self.ckpt.save(self.step, self.engine, self.model, trainer_state, local)
        if path is None:
            return False
        self.metrics.line(f"checkpoint step {self.step}: {path}")
        if self.hub is not None:
            self.hub.submit(path / "model", f"step {self.step}")
        return True

    def card(self) -> dict:
        """What the model card states: the recipe, the data, the steps and the last eval's figures."""
        return {**self.card_info, "steps": self.step, "training_eval": self.last_eval}

    def save_final(self) -> bool:
        """The self-contained model folder, `<run>/final` (speechlm.train.final; collective)."""
        final = final_mod.write_final(self.model, self.run_dir, self.rank, self.card())
        if final is not None and self.rank == 0:
            self.metrics.line(f"final model at step {self.step}: {final}")
            if self.hub is not None:
                self.hub.submit(final, f"final (step {self.step})")
        if dist.is_initialized():
            dist.barrier()
        return final is not None

    def finish(self) -> None:
        skipped = {k: v for k, v in self.train_loader.stats.items() if k in SKIP_KEYS and v}
        log.warning(
            "rank %d data summary: skipped %d (%s); decoded %d clips",
            self.rank,
            sum(skipped.values()),
            ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())) or "none",
            self.train_loader.stats.get("clips_decoded", 0),
        )
        self.ledger.close()
        if self.hub is not None:
            self.hub.close()
        self.metrics.close()
        if dist.is_initialized():
            dist.barrier()
