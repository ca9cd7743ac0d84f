"""The trainer end to end, in this process (world size 1, gloo): the real tiny twin, the real reader on
the synthetic shards (the session's `synthetic_shards`). One straight run feeds most assertions; a second run resumes from its middle."""  # noqa: E501

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest
import torch

from speechlm import config as config_mod
from speechlm.config import Config
from speechlm.train.loop import Trainer

STEPS = 25  # several epochs of the small shared shard set (64 train clips, batch 16)
OVERRIDES = [
    "training.per_device_train_batch_size=16",
    f"training.max_steps={STEPS}",
    "training.warmup_steps=3",
    "training.eval_steps=12",
    "training.save_steps=12",
    "training.logging_steps=1",
    "training.save_total_limit=null",
    "data.max_eval_samples_per_dataset=16",
    "data.num_workers=1",
    # resume with augmentation on: test_reliability_faults.py
    "data.augment.enabled=false",
    # every checkpoint is pushed (this machine has no Hub: each push fails, quickly) so that the test
    # can list what a push hands over
    "training.push_to_hub=true",
    "training.hub_model_id=someone/speechlm-e2e",
    "training.hub_retry_backoff_s=0.01",
]


def run(tmp: Path, name: str, shards: Path, *extra) -> Trainer:
    cfg = config_mod.load(
        Config,
        "tiny",
        None,
        OVERRIDES
        + [
            f"training.output_dir={tmp}",
            f"training.run_name={name}",
            f"data.train=[{{path: {shards}, split: train}}]",
            f"data.eval=[{{path: {shards}, split: eval}}]",
            *extra,
        ],
    )
    trainer = Trainer(cfg)
    assert trainer.run() == 0
    return trainer


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def ledger(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "clips.rank0.jsonl").read_text().splitlines()]


def losses(rows) -> dict[int, float]:
    return {r["step"]: r["train/loss"] for r in rows if "train/loss" in r}


@pytest.fixture(scope="module")
def straight(tmp_path_factory, synthetic_shards):
    tmp = tmp_path_factory.mktemp("runs")
    trainer = run(tmp, "straight", synthetic_shards)
    return trainer, tmp  # the world-1 process group stays for later modules (DeepSpeed caches it)


def test_loss_falls_and_metrics_are_logged(straight):
    trainer, _ = straight
    rows = metrics(trainer.run_dir)
    loss = losses(rows)
    assert sorted(loss) == list(range(1, STEPS + 1))
    first, last = sum(loss[s] for s in range(1, 6)) / 5, sum(loss[s] for s in range(STEPS - 4, STEPS + 1)) / 5
    assert last < first - 0.5, (first, last)
    evals = [r["eval/loss"] for r in rows if "eval/loss" in r]
    assert len(evals) == 3 and all(math.isfinite(e) for e in evals)  # steps 12, 24 and the final one
    assert evals[-1] < evals[0]
    step = next(r for r in rows if r["step"] == 5)
    for key in (
        "train/grad_norm",
        "perf/samples_per_s",
        "perf/audio_seconds_per_s",
        "perf/tokens_per_s",
        "perf/step_time_s",
        "perf/peak_memory_gb",
    ):
        assert math.isfinite(step[key]) and step[key] > 0, key
    assert rows[0]["effective_batch_size"] == 16
    assert (trainer.run_dir / "config.yaml").is_file()


def test_group_learning_rates_follow_the_schedule(straight):
    trainer, _ = straight
    t = trainer.cfg.training
    rows = {r["step"]: r for r in metrics(trainer.run_dir) if "train/loss" in r}

    def expected(base, done):  # lr used by the update of step `done` (the scheduler starts at 0)
        s = done - 1
        if s < t.warmup_steps:
            return base * s / t.warmup_steps
        return base * 0.5 * (1 + math.cos(math.pi * (s - t.warmup_steps) / (STEPS - t.warmup_steps)))

    for step in (1, 2, 4, 10, 20):
        # the row logs the lr after the step's update, i.e. the one the next step uses
        assert rows[step]["train/learning_rate/projector"] == pytest.approx(
            expected(t.learning_rate, step + 1), abs=1e-12
        )
        assert rows[step]["train/learning_rate/decoder"] == pytest.approx(
            expected(t.decoder_learning_rate, step + 1), abs=1e-12
        )


def test_frozen_weights_bit_identical_and_trained_ones_moved(straight):
    trainer, _ = straight
    from transformers import set_seed

    from speechlm.model import build_model

    set_seed(trainer.cfg.training.seed)
    fresh = dict(build_model(trainer.cfg).named_parameters())
    frozen = moved = 0
    for name, p in trainer.engine.module.named_parameters():
        if p.requires_grad:
            moved += not torch.equal(p.detach(), fresh[name].detach())
        else:
            assert torch.equal(p.detach(), fresh[name].detach()), name
            frozen += 1
    assert frozen > 0 and moved > 0
    # the frozen encoder stays in eval mode: its BatchNorm statistics never move (pitfall 12)
    fresh_buffers = dict(build_model(trainer.cfg).named_buffers())
    for name, b in trainer.engine.module.encoder.named_buffers():
        assert torch.equal(b, fresh_buffers["encoder." + name]), name


def test_every_clip_once_per_epoch(straight):
    trainer, _ = straight
    rows = ledger(trainer.run_dir)
    assert [r["step"] for r in rows] == list(range(STEPS))
    per_epoch = trainer.train_loader.plan(0).steps
    assert per_epoch < STEPS
    seen = Counter(i for r in rows[:per_epoch] for i in r["ids"])
    manifest = json.loads((Path(trainer.cfg.data.train[0].path) / "manifest.json").read_text())
    train_ids = {i for s in manifest["splits"]["train"]["shards"] for i in s["ids"]}
    assert set(seen) == train_ids and max(seen.values()) == 1


def test_export_reproduces_the_live_model(straight):
    trainer, _ = straight
    from speechlm.model import from_pretrained

    ckpt = trainer.run_dir / "checkpoints" / f"step-{STEPS}"
    assert (trainer.run_dir / "checkpoints" / "latest").read_text() == ckpt.name
    loaded = from_pretrained(ckpt / "model")
    batch = next(iter(trainer.eval_loader))
    live = trainer.engine.module
    live.eval()
    loaded.eval()
    with torch.no_grad():
        a, b = live(**batch).loss.item(), loaded(**batch).loss.item()
    # the live module computes with DeepSpeed's bf16 copies of the projector and LoRA, the folder holds
    # their fp32 masters (rounded to bf16 again by autocast, but not in every op: the projector's norm);
    # bf16 compute rounds at 2^-8 relative, and which kernels round how depends on the CPU (AVX2 / AVX-512)
    assert a == pytest.approx(b, rel=2**-8)
    # the self-contained final folder loads with transformers (the same reader): the same logits
    from transformers import AutoModel

    hf = AutoModel.from_pretrained(trainer.run_dir / "final", trust_remote_code=True)
    assert (ckpt / "model" / "README.md").read_text().count(f"- steps: {STEPS}") == 1
    args = [batch[k] for k in ("input_features", "feature_mask", "input_ids", "attention_mask", "labels")]
    final = from_pretrained(trainer.run_dir / "final")
    with torch.no_grad():
        assert torch.equal(hf(*args)[0], loaded.label_logits(*args)[0])
        assert torch.equal(final.label_logits(*args)[0], loaded.label_logits(*args)[0])
    # the checkpoint's own folder names tiny/ bases, which only speechlm can build: transformers says so
    with pytest.raises(ValueError, match=r"tiny/granite_speech5.*speechlm export"):
        AutoModel.from_pretrained(ckpt / "model", trust_remote_code=True)


def _files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def test_a_checkpoint_holds_what_the_run_trained(straight):
    from safetensors import safe_open

    trainer, _ = straight
    ckpt = trainer.run_dir / "checkpoints" / f"step-{STEPS}"
    model = trainer.engine.module
    trained = {n: p.numel() for n, p in model.named_parameters() if p.requires_grad}
    module = torch.load(ckpt / "ds" / "state" / "mp_rank_00_model_states.pt", weights_only=False)["module"]
    # DeepSpeed's module state: the trained parameters and the projector's CTC blank; no frozen (tied) head
    assert set(trained) <= set(module) and set(module) - set(trained) == {"projector.ctc_blank"}
    files = _files(ckpt / "model")
    assert not any(f.startswith(("encoder/", "decoder/")) for f in files)
    with safe_open(ckpt / "model" / "model.safetensors", "pt") as f:
        assert all(k.startswith("projector.") for k in f.keys())
    # bytes: the trained parameters in fp32 (the folder), bf16 (DeepSpeed's module copy) and 3 x fp32 (AdamW's
    # master and moments), plus the tokenizer and files of a few kB (config, card, code, trainer state)
    n = sum(trained.values())
    tokenizer = sum(v for k, v in files.items() if k.startswith(("tokenizer", "chat_template")))
    assert sum(_files(ckpt).values()) <= n * (4 + 2 + 12) + tokenizer + 400_000


def test_a_push_sends_what_the_run_trained_and_the_final_folder_the_rest(straight):
    trainer, _ = straight
    sent = dict(trainer.hub.submitted)
    assert sorted(sent) == ["final (step 25)", "step 12", "step 24", "step 25"]
    for message, files in sent.items():
        bases = [f for f in files if f.startswith(("encoder/", "decoder/"))]
        assert {"config.json", "model.safetensors", "adapter/adapter_model.safetensors", "README.md"} <= set(files)
        assert not any(f.startswith(("ds/", "universal/")) or f.endswith(".pt") for f in files), message
        assert bool(bases) == message.startswith("final"), message


def test_no_path_of_this_machine_in_a_model_folder(straight):
    from speechlm.cache import cache_root

    trainer, tmp = straight
    machine = [str(tmp), str(Path.home()), str(cache_root()), str(Path(trainer.cfg.data.train[0].path))]
    for folder in (trainer.run_dir / "checkpoints" / f"step-{STEPS}" / "model", trainer.run_dir / "final"):
        texts = [p for p in folder.rglob("*") if p.suffix in (".json", ".md", ".jinja", ".py", ".txt")]
        assert {"config.json", "README.md", "tokenizer_config.json", "preprocessor_config.json"} <= {
            p.name for p in texts
        }
        for p in texts:
            text = p.read_text()
            assert not [m for m in machine if m in text], p
            if p.suffix == ".json" and p.name != "tokenizer.json":  # a vocabulary holds tokens like "/"
                strings = re.findall(r'"(/[^"]*)"', text)
                assert not strings, (p, strings[:3])


def test_resume_continues_the_same_trajectory(straight):
    trainer, tmp = straight
    mid = trainer.run_dir / "checkpoints" / "step-12"
    resumed = run(tmp, "resumed", Path(trainer.cfg.data.train[0].path), f"training.resume_from_checkpoint={mid}")
    a, b = losses(metrics(trainer.run_dir)), losses(metrics(resumed.run_dir))
    assert sorted(b) == list(range(13, STEPS + 1))
    for s in b:
        assert b[s] == pytest.approx(a[s], rel=1e-5, abs=1e-6), s
    straight_ids = [r["ids"] for r in ledger(trainer.run_dir) if r["step"] >= 12]
    assert [r["ids"] for r in ledger(resumed.run_dir)] == straight_ids


def test_divergence_skips_updates_then_stops(straight, caplog):
    """lr 1e30 blows the weights up: every later loss is non-finite, so updates are skipped, the
    batch's clip ids are logged, and the run stops after max_nonfinite_in_a_row with status 3."""
    _, tmp = straight
    cfg = config_mod.load(
        Config,
        "tiny",
        None,
        OVERRIDES
        + [
            f"training.output_dir={tmp}",
            "training.run_name=diverge",
            "training.max_steps=8",
            "training.warmup_steps=0",
            "training.learning_rate=1e30",
            "training.decoder_learning_rate=1e30",
            "training.max_nonfinite_in_a_row=2",
            "training.eval_steps=0",
            "training.save_steps=0",
            f"data.train=[{{path: {straight[0].cfg.data.train[0].path}, split: train}}]",
            "data.eval=[]",
        ],
    )
    trainer = Trainer(cfg)
    assert trainer.run() == 3
    rows = metrics(trainer.run_dir)
    bad = [r for r in rows if r.get("train/nonfinite_step")]
    assert len(bad) == 2 and bad[1]["step"] == bad[0]["step"] + 1
    assert bad[0]["train/nonfinite_clips"] == ledger(trainer.run_dir)[bad[0]["step"] - 1]["ids"]
    assert "non-finite loss or gradient; update skipped" in caplog.text
    assert not (trainer.run_dir / "checkpoints").exists()  # no checkpoint of a diverged model


def test_wandb_offline_gets_the_same_metrics(straight, monkeypatch):
    _, tmp = straight
    monkeypatch.setenv("WANDB_MODE", "offline")
    shards = straight[0].cfg.data.train[0].path
    trainer = run(
        tmp,
        "wandb",
        Path(shards),
        "training.report_to=wandb",
        "training.max_steps=2",
        "training.eval_steps=0",
        "training.save_steps=0",
    )
    runs = list((trainer.run_dir / "wandb").glob("offline-run-*/*.wandb"))
    assert len(runs) == 1 and runs[0].stat().st_size > 0
    assert [r["step"] for r in metrics(trainer.run_dir) if "train/loss" in r] == [1, 2]


def test_the_encoder_cache_trains_the_same_run(straight, tmp_path):
    """training.encoder_cache_gb (speechlm.model.encoder_cache): from the second epoch on, every clip's
    encoder output is read from memory instead of encoded, and the run trains as the straight one."""
    trainer, _ = straight
    shards = Path(trainer.cfg.data.train[0].path)
    cached = run(tmp_path, "cached", shards, "training.encoder_cache_gb=0.1", "training.push_to_hub=false")
    rows = metrics(cached.run_dir)
    a, b = losses(metrics(trainer.run_dir)), losses(rows)
    assert sorted(b) == sorted(a)
    for s in b:
        assert b[s] == pytest.approx(a[s], rel=1e-5, abs=1e-6), s
    share = next(r for r in rows if r["step"] == STEPS and "perf/encoder_cache_hit_share" in r)
    # 25 steps of 16 over 64 clips: the first epoch's 64 encoded, the other 336 (and repeated eval clips) read
    assert share["perf/encoder_cache_hit_share"] > 0.8 and share["perf/encoder_cache_gb"] > 0
