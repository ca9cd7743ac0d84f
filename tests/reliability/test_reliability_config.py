"""Issue #7, item 6: user mistakes in configs and commands.

Every case must end with exit status 2, ONE line on stderr that names the problem (a mistyped key
as typed, with the nearest valid key), no traceback, and quickly: validation happens before any
shard build, process group or model, so each in-process case takes well under a few seconds.
Most cases run through the CLIs' in-process `main(argv)`; a handful run as real subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from speechlm.config import REPO_ROOT, Config, ConfigError, load

PER_CASE_S = 5.0  # generous on a loaded 2-core box; a model build would take far longer

# (cli, argv, substrings the one error line must contain)
TRAIN = "train"
CASES: list[tuple[str, list[str], list[str]]] = []


def case(cli, argv, *must):
    CASES.append((cli, argv, list(must)))


# ---- mistyped keys: named as typed, with the nearest valid key
for typo, nearest in [
    ("training.lerning_rate=1e-3", "learning_rate"),
    ("training.per_device_train_batchsize=8", "per_device_train_batch_size"),
    ("model.lora_rnk=8", "lora_rank"),
    ("data.num_worker=2", "num_workers"),
    ("deepspeed.zero_stag=3", "zero_stage"),
    ("trainng.seed=1", "training"),
    ("training.warmup_step=10", "warmup_steps"),
    ("data.shufle_shards_per_block=2", "shuffle_shards_per_block"),
    ("training.save_step=5", "save_steps"),
    ("training.gradient_accumulation_step=2", "gradient_accumulation_steps"),
    ("model.audio_model=x", "audio_model_id"),
    ("training.freeze_projecter=true", "freeze_projector"),
    ("data.train=[{path: shards/synthetic, wieght: 1}]", "weight"),
]:
    typed = {"wieght": "data.train[0].wieght", "trainng": "trainng"}.get(
        next((k for k in ("wieght", "trainng") if k in typo), ""), typo.split("=")[0]
    )
    case(TRAIN, ["--config", "tiny", typo], f"'{typed}'", f"'{nearest}'")

# ---- wrong types and values outside a closed set
for bad, must in [
    ("training.learning_rate=fast", "training.learning_rate"),
    ("training.per_device_train_batch_size=8.5", "per_device_train_batch_size"),
    ("training.per_device_train_batch_size=eight", "per_device_train_batch_size"),
    ("training.bf16=maybe", "training.bf16"),
    ("training.max_steps=[1]", "training.max_steps"),
    ("model.lora_rank=true", "model.lora_rank"),
    ("data.train=shards/synthetic", "data.train"),
    ("training.lr_scheduler_type=cosin", "'cosine'"),
    ("model.model_dtype=fp16", "model.model_dtype"),
    ("data.batching=second", "'seconds'"),
    ("training.report_to=tensorboard", "training.report_to"),
    ("training.num_train_epochs=two", "num_train_epochs"),
    ("deepspeed.offload=yes please", "deepspeed.offload"),
]:
    case(TRAIN, ["--config", "tiny", bad], must)

# ---- impossible batch, accumulation and schedule values
for bad, must in [
    (["training.per_device_train_batch_size=0"], "per_device_train_batch_size"),
    (["training.per_device_train_batch_size=-4"], "per_device_train_batch_size"),
    (["training.gradient_accumulation_steps=0"], "gradient_accumulation_steps"),
    (["training.per_device_eval_batch_size=0"], "per_device_eval_batch_size"),
    (["data.batching=seconds"], "data.batch_seconds"),
    (["training.max_steps=-1", "training.num_train_epochs=0"], "num_train_epochs"),
    (["training.learning_rate=-1"], "training.learning_rate"),
    (["training.warmup_steps=-5"], "warmup_steps"),
    (["data.num_workers=-1"], "data.num_workers"),
    (["data.prefetch_factor=0"], "data.prefetch_factor"),
    (["training.adam_beta2=1.5"], "adam_beta"),
    (["model.use_lora=true", "model.lora_rank=0"], "model.lora_rank"),
]:
    case(TRAIN, ["--config", "tiny", *bad], must)

# ---- per_device_train_batch_size=auto without a device to size for (no CUDA here), or with a fixed accumulation
if not torch.cuda.is_available():
    case(TRAIN, ["--config", "tiny", "training.per_device_train_batch_size=auto"], "SPEECHLM_DEVICE_MEMORY_GIB")
case(
    TRAIN,
    ["--config", "tiny", "training.per_device_train_batch_size=auto", "training.gradient_accumulation_steps=2"],
    "gradient_accumulation_steps",
)

# ---- data that is not there
case(TRAIN, ["--config", "tiny", "data.recipe=null", "data.train=[{path: /nonexistent/shards}]"], "/nonexistent/shards")
case(TRAIN, ["--config", "tiny", "data.recipe=null", "data.eval=[{path: /nonexistent/eval}]"], "/nonexistent/eval")
case(TRAIN, ["--config", "tiny", "data.train=[]"], "data.train")
case(TRAIN, ["--config", "tiny", "data.train=[{path: ''}]"], "data.train[0].path")
case(TRAIN, ["--config", "tiny", "data.train=[{path: shards/synthetic, weight: -1}]"], "data.train[0].weight")
case(TRAIN, ["--config", "tiny", "training.resume_from_checkpoint=/nonexistent/ckpt"], "resume_from_checkpoint")

# ---- recipes and the command line itself
case(TRAIN, ["--config", "tinny"], "'tinny'", "'tiny'")
case(TRAIN, ["--config", "tiny", "--experiment", "nosuch"], "'nosuch'")
case(TRAIN, ["--config", "/nonexistent/recipe.yaml"], "/nonexistent/recipe.yaml")
case(TRAIN, ["--config", "{bad_yaml}"], "not valid YAML")
case(TRAIN, ["--config", "{list_yaml}"], "mapping")
case(TRAIN, ["--config", "tiny", "training.seed"], "training.seed")
case(TRAIN, ["--config", "tiny", "training.seed.x=1"], "training.seed")

# ---- a ZeRO config that contradicts the training config
case(TRAIN, ["--config", "tiny", "deepspeed.zero_stage=5"], "deepspeed.zero_stage")
case(TRAIN, ["--config", "tiny", "deepspeed.offload=true"], "deepspeed.offload")
case(TRAIN, ["--config", "tiny", "deepspeed.config=/nonexistent/ds.json"], "deepspeed.config")
for ds, must in [
    ({"train_micro_batch_size_per_gpu": 4}, "train_micro_batch_size_per_gpu"),
    ({"zero_optimization": {"stage": 3}}, "zero_optimization.stage"),
    ({"fp16": {"enabled": True}}, "fp16"),
    ({"optimizer": {"type": "Adam"}}, "optimizer"),
    ({"gradient_accumulation_steps": 4}, "gradient_accumulation_steps"),
    ({"bf16": {"enabled": False}}, "bf16.enabled"),
    ({"gradient_clipping": 5.0}, "gradient_clipping"),
    ("{not json", "not valid JSON"),
]:
    case(TRAIN, ["--config", "tiny", "deepspeed.config={ds:" + json.dumps(ds) + "}"], must)

# ---- freeze combinations with nothing (or something impossible) to train
ALL_FROZEN = [
    "training.freeze_projector=true",
    "training.freeze_audio_encoder=true",
    "training.freeze_language_model=true",
    "training.freeze_text_embed_tokens=true",
]
case(TRAIN, ["--config", "tiny", *ALL_FROZEN, "model.use_lora=false"], "nothing left to train")
case(
    TRAIN,
    ["--config", "tiny", "training.use_lora=false"],
    "is set in one place now: 'model.use_lora'",
)
case(
    TRAIN, ["--config", "tiny", "training.freeze_language_model=false", "model.use_lora=true"], "freeze_language_model"
)
case(TRAIN, ["--config", "tiny", "training.push_to_hub=true"], "hub_model_id")

# ---- augmentation (issue #21): values here, folders and codecs before any process group
case(TRAIN, ["--config", "tiny", "data.augment.noise.snr_db=[20, 5]"], "data.augment.noise.snr_db", "upside down")
case(TRAIN, ["--config", "tiny", "data.augment.speed.factors=[0.9, 0]"], "data.augment.speed.factors[1]", "> 0")
case(TRAIN, ["--config", "tiny", "data.augment.speed.factors=[-1.1]"], "data.augment.speed.factors[0]")
case(TRAIN, ["--config", "tiny", "data.augment.reverb.prob=2"], "data.augment.reverb.prob")
case(TRAIN, ["--config", "tiny", "data.augment.nosie.prob=0.5"], "'data.augment.nosie'", "'noise'")
case(
    TRAIN,
    ["--config", "tiny", "data.augment.noise.dir=/nonexistent/musan"],
    "data.augment.noise.dir",
    "/nonexistent/musan",
)
case(TRAIN, ["--config", "tiny", "data.augment.reverb.dir={empty_dir}"], "data.augment.reverb.dir", "no audio files")

# ---- the other commands
SHARD, PLAN, MODEL, EVAL, TRANSCRIBE, REPORT = "shard", "plan", "model", "eval", "transcribe", "report"
case(SHARD, ["--config", "synthtic"], "'synthtic'", "'synthetic'")
case(SHARD, ["--config", "synthetic", "output.shard_clip=5"], "'output.shard_clip'", "'shard_clips'")
case(SHARD, ["--config", "synthetic", "output.shard_clips=0"], "shard_clips")
case(SHARD, ["--config", "synthetic", "normalize.min_seconds=30"], "min_seconds")
case(SHARD, ["--config", "synthetic", "workers=-2"], "workers")
case(SHARD, ["--config", "synthetic", "--workers", "two"], "--workers")
case(SHARD, ["--config", "synthetic", "--num-tasks", "3", "--task-index", "3"], "--task-index")
case(SHARD, ["merge", "/nonexistent/shards"], "/nonexistent/shards")
case(PLAN, ["--config", "tiny", "training.lerning_rate=1"], "'training.lerning_rate'", "'learning_rate'")
case(PLAN, ["--config", "tiny", "deepspeed.zero_stage=4"], "zero_stage")
case(PLAN, ["--config", "tiny", "training.gradient_accumulation_steps=0"], "gradient_accumulation_steps")
case(MODEL, ["--count", "--config", "tiny", "model.lora_rnk=4"], "'model.lora_rnk'", "'lora_rank'")
case(MODEL, ["--count", "training.freeze_projector=true", "model.use_lora=false"], "nothing left to train")
case(MODEL, ["--config", "tiny"], "--count")
# an encoder no family handles: named with the supported ones, before any weights load
case(PLAN, ["--config", "tiny", "model.audio_model_id={wav2vec2_dir}"], "model.audio_model_id", "'wav2vec2'", "whisper")
case(MODEL, ["--count", "--config", "tiny", "model.audio_model_id={wav2vec2_dir}"], "'wav2vec2'", "granite_speech5")
case(EVAL, ["-m", "/nonexistent/model", "-d", "shards/synthetic"], "/nonexistent/model")
case(EVAL, ["-m", "{model_dir}", "-d", "/nonexistent/set"], "/nonexistent/set")
case(EVAL, ["-m", "{model_dir}", "-d", "shards/synthetic", "-n", "0"], "-n")
case(
    EVAL,
    ["-m", "{model_dir}", "-d", "shards/synthetic", "--noise-snr-db", "5", "--noise-dir", "/nonexistent/musan"],
    "--noise-dir",
    "/nonexistent/musan",
)
case(TRANSCRIBE, ["-m", "/nonexistent/model", "{bad_yaml}"], "/nonexistent/model")
case(TRANSCRIBE, ["-m", "{model_dir}", "/nonexistent/a.wav"], "/nonexistent/a.wav")
case(TRANSCRIBE, ["-m", "{model_dir}", "{bad_yaml}", "--window-seconds", "0"], "--window-seconds")
case(TRANSCRIBE, ["-m", "{model_dir}", "{bad_yaml}", "--merge-seconds", "-1"], "--merge-seconds")
case(TRANSCRIBE, ["-m", "{model_dir}", "{bad_yaml}", "--min-pause-seconds", "0"], "--min-pause-seconds")
case(TRANSCRIBE, ["-m", "{model_dir}", "{bad_yaml}", "--long-form", "vad"], "--long-form", "segments")
case(EVAL, ["-m", "{model_dir}", "-d", "shards/synthetic", "--threshold-db", "0"], "--threshold-db")
case(EVAL, ["-m", "{model_dir}", "-d", "shards/synthetic", "--max-seconds", "-1"], "--max-seconds")
case(REPORT, ["/nonexistent/run"], "/nonexistent/run")
case(REPORT, ["{empty_dir}"], "metrics.jsonl")


def _main(cli):
    if cli == TRAIN:
        from speechlm.commands.train import main
    elif cli == SHARD:
        from speechlm.commands.shard import main
    elif cli == PLAN:
        from speechlm.commands.plan import main
    elif cli == MODEL:
        from speechlm.commands.model import main
    elif cli == EVAL:
        from speechlm.commands.eval import main
    elif cli == TRANSCRIBE:
        from speechlm.commands.transcribe import main
    else:
        from speechlm.commands.report import main
    return main


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mistakes")
    (tmp / "bad.yaml").write_text("training: {seed: [1, 2\n")
    (tmp / "list.yaml").write_text("- a\n- b\n")
    (tmp / "model").mkdir()  # an export folder that is not one: no speechlm.json
    (tmp / "empty").mkdir()
    from transformers import Wav2Vec2Config

    Wav2Vec2Config().save_pretrained(tmp / "wav2vec2")  # an audio model of no supported encoder family
    return {
        "bad_yaml": str(tmp / "bad.yaml"),
        "list_yaml": str(tmp / "list.yaml"),
        "model_dir": str(tmp / "model"),
        "empty_dir": str(tmp / "empty"),
        "wav2vec2_dir": str(tmp / "wav2vec2"),
        "tmp": tmp,
    }


def _fill(argv, places):
    out = []
    for a in argv:
        if "{ds:" in a:  # a user DeepSpeed JSON file with this content
            key, content = a.split("={ds:", 1)
            content = content[:-1]
            path = places["tmp"] / f"ds{abs(hash(content))}.json"
            path.write_text(json.loads(content) if content.startswith('"') else content)
            a = f"{key}={path}"
        for k, v in places.items():
            a = a.replace("{" + k + "}", str(v))
        out.append(a)
    return out


def test_at_least_fifty_mistakes():
    assert len(CASES) >= 50
    assert {c[0] for c in CASES} == {TRAIN, SHARD, PLAN, MODEL, EVAL, TRANSCRIBE, REPORT}


@pytest.mark.parametrize("cli,argv,must", CASES, ids=[f"{c[0]}:{' '.join(c[1])[:60]}" for c in CASES])
def test_mistake_is_one_clear_line(cli, argv, must, places, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # recipes name shards/... relative to the checkout
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("SPEECHLM_DEVICE_MEMORY_GIB", raising=False)
    argv = _fill(argv, places)
    if cli == TRAIN:
        argv = argv + [f"training.output_dir={tmp_path}"]
    main = _main(cli)
    capsys.readouterr()
    had_group = torch.distributed.is_available() and torch.distributed.is_initialized()
    t0 = time.perf_counter()
    with pytest.raises(SystemExit) as exc:
        main(argv)
    took = time.perf_counter() - t0
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    for m in must:
        assert m in lines[0], (m, lines[0])
    assert took < PER_CASE_S, f"{took:.1f} s: the mistake was found late (after building something)"
    if cli == TRAIN:  # found before any process group (and so before the model)
        assert had_group or not torch.distributed.is_initialized()
        assert not list(Path(tmp_path).iterdir()), "a run dir was created before the config was checked"


SUBPROCESS = [
    (["launch/train.py", "--config", "tiny", "training.lerning_rate=1"], "'training.lerning_rate'"),
    (["launch/train.py", "--config", "tiny", *ALL_FROZEN, "model.use_lora=false"], "nothing left"),
    (["-m", "speechlm.shard", "--config", "synthetic", "output.shard_clip=5"], "'shard_clips'"),
    (["-m", "speechlm.plan", "--config", "tiny", "deepspeed.zero_stag=3"], "'zero_stage'"),
    (["-m", "speechlm.model", "--count", "model.lora_rnk=4"], "'lora_rank'"),
    (["-m", "speechlm.eval", "-m", "/nonexistent/model", "-d", "shards/synthetic"], "/nonexistent/model"),
]


@pytest.mark.slow  # six interpreters importing torch + deepspeed: ~1 min on 2 cores
def test_real_commands_exit_2_with_one_line():
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(
            [sys.executable, *argv], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for argv, _ in SUBPROCESS
    ]
    for p, (argv, must) in zip(procs, SUBPROCESS):
        out, err = p.communicate(timeout=300)
        assert p.returncode == 2, (argv, err[-2000:])
        lines = [
            line
            for line in err.splitlines()
            if line.strip() and "WARNING" not in line and "real_accelerator" not in line
        ]
        assert len(lines) == 1 and "error:" in lines[0] and must in lines[0], (argv, err[-2000:])
        assert "Traceback" not in err


# ---- key=value overrides index into lists: data.train.0.weight=2
TWO_SETS = "data.train=[{path: a}, {path: b, weight: 3}]"


def test_override_index_changes_exactly_that_element():
    before = load(Config, "tiny", None, [TWO_SETS])
    after = load(Config, "tiny", None, [TWO_SETS, "data.train.1.weight=0.5", "data.train.0.path=/x"])
    assert [(s.path, s.weight, s.split) for s in after.data.train] == [("/x", 1.0, "train"), ("b", 0.5, "train")]
    after.data.train[0].path, after.data.train[1].weight = "a", 3.0
    assert after == before  # nothing else moved
    assert load(Config, "tiny", None, ["data.train.0.weight=2"]).data.train[0].weight == 2.0  # a recipe's list


@pytest.mark.parametrize(
    "override,must",
    [
        ("data.train.2.weight=1", ["'data.train.2.weight'", "index 2 out of range", "list of 2 elements"]),
        ("data.train.-1.weight=1", ["'data.train.-1.weight'", "out of range"]),
        ("data.train.weight=1", ["'data.train.weight'", "'weight' is not an index"]),
        ("data.train.1.wieght=1", ["'data.train[1].wieght'", "'weight'", "command line"]),
        ("data.train.1.weight=heavy", ["data.train[1].weight", "expected float", "'heavy'"]),
        ("data.train.0.path=[a]", ["data.train[0].path", "expected str"]),
    ],
)
def test_override_index_mistake_is_one_line(override, must):
    with pytest.raises(ConfigError) as exc:
        load(Config, "tiny", None, [TWO_SETS, override])
    msg = str(exc.value)
    assert "\n" not in msg
    for m in must:
        assert m in msg, (m, msg)
