"""The course's free run: the `free_run` overlay resolves and plans offline, and the Hub LibriSpeech
shard recipe builds from a local parquet copy laid out like openslr/librispeech_asr."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

from paths import REPO
from speechlm.config import Config, load
from speechlm.shard import build, load_recipe

GIB = 1024**3


def test_free_run_overlay_resolves():
    cfg = load(Config, None, "free_run")  # production + the shipped overlay
    assert cfg.model.text_model_id == "Qwen/Qwen3.5-0.8B"
    assert cfg.model.audio_model_id == load(Config).model.audio_model_id and cfg.model.use_lora
    assert cfg.training.report_to == "none" and not cfg.training.push_to_hub
    t = cfg.training
    assert (t.per_device_train_batch_size, t.gradient_accumulation_steps) == (4, 4)
    # the trainer builds the data from the Hub recipe into the folder it reads, eval reads its test split
    recipe, path = load_recipe(Path(cfg.data.recipe).stem)
    assert path == (REPO / cfg.data.recipe).resolve()
    assert [(d.path, d.split) for d in cfg.data.train] == [(f"shards/{recipe.name}", "train")]
    assert [(d.path, d.split) for d in cfg.data.eval] == [(f"shards/{recipe.name}", "test")]
    # the offline twin is another recipe
    assert load(Config, "tiny").model.text_model_id.startswith("tiny/")


def test_free_run_plans_offline_within_a_16gb_card():
    r = subprocess.run(
        [sys.executable, "-m", "speechlm.plan", "--experiment", "free_run", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert "bundled" in plan["sources"]["decoder"]  # offline: the bundled Qwen3.5-0.8B config
    p = plan["params"]
    assert p["decoder_params"] == 752_393_024 and p["encoder_params"] == 472_928_256
    assert p["trainable_params"] == p["lora_params"] + p["projector_params"]
    assert 6 <= plan["memory_bytes"]["total"] / GIB <= 12  # the course's 8-10 GB
    assert plan["config"]["effective_batch"] == 16
    d = plan["disk_bytes"]
    assert d["hub_cache"] > 2 * GIB and d["checkpoints"] > 0 and d["total"] >= d["hub_cache"] + d["checkpoints"]


# --------------------------------------------------------------------------- LibriSpeech from the Hub


def _flac(seconds: float, seed: int) -> bytes:
    buf = io.BytesIO()
    wave = 0.1 * np.random.default_rng(seed).standard_normal(int(16000 * seconds))
    sf.write(buf, wave.astype("float32"), 16000, format="FLAC")
    return buf.getvalue()


TEXTS = ["JOHN MET MARY IN LONDON ON MONDAY", "I SAW THE FBI IN PARIS", "HE SAID NOTHING AT ALL"]


def librispeech_copy(root: Path) -> dict:
    """openslr/librispeech_asr's layout: the `clean` config's splits as parquet under clean/<split>/,
    declared in the README's configs, with its columns (audio as {bytes, path}, an Audio feature)."""
    import datasets

    feats = datasets.Features(
        {
            "file": datasets.Value("string"),
            "audio": {"bytes": datasets.Value("binary"), "path": datasets.Value("string")},
            "text": datasets.Value("string"),
            "speaker_id": datasets.Value("int64"),
            "chapter_id": datasets.Value("int64"),
            "id": datasets.Value("string"),
        }
    )
    ids = {}
    for split, (speaker, chapter, n) in {"validation": (1272, 128104, 6), "test": (2094, 142345, 3)}.items():
        rows = {k: [] for k in feats}
        for i in range(n):
            oid = f"{speaker}-{chapter}-{i:04d}"
            rows["file"].append(f"{oid}.flac")
            rows["audio"].append({"bytes": _flac(1.0 + 0.1 * i, i), "path": f"{oid}.flac"})
            rows["text"].append(TEXTS[i % len(TEXTS)])
            rows["speaker_id"].append(speaker)
            rows["chapter_id"].append(chapter)
            rows["id"].append(oid)
        # the Hub's feature is Audio(sampling_rate=16000); cast as storage only (no torchcodec here)
        ds = datasets.Dataset.from_dict(rows, features=feats).cast_column("audio", datasets.Audio(sampling_rate=16000))
        (root / "clean" / split).mkdir(parents=True)
        ds.to_parquet(str(root / "clean" / split / "0000.parquet"))
        ids[split] = rows["id"]
    (root / "README.md").write_text(
        "---\nconfigs:\n- config_name: clean\n  data_files:\n"
        "  - split: validation\n    path: clean/validation/*.parquet\n"
        "  - split: test\n    path: clean/test/*.parquet\n---\n"
    )
    return ids


def test_hub_librispeech_recipe_is_the_default_name():
    recipe, path = load_recipe("librispeech")  # what `speechlm eval -d librispeech` builds
    src = recipe.sources[0]
    assert (src.kind, src.path, src.subset, src.audio_column, src.text_column, src.id_column) == (
        "hf",
        "openslr/librispeech_asr",
        "clean",
        "audio",
        "text",
        "id",
    )
    assert src.splits == {"train": ["validation"], "test": ["test"]} and recipe.normalize.truecase
    folders, _ = load_recipe("librispeech_folders")
    assert folders.sources[0].kind == "librispeech" and folders.name != recipe.name


def test_hub_librispeech_recipe_builds_from_a_local_parquet_copy(tmp_path):
    from speechlm.inference import dataset_clips

    copy = tmp_path / "librispeech_asr"
    ids = librispeech_copy(copy)
    out = build(
        "librispeech",
        tmp_path / "shards",
        workers=1,
        overrides=[f"sources.0.path={copy}", f"sources.0.cache_dir={tmp_path / 'hf_cache'}"],
    )
    man = json.loads((out / "manifest.json").read_text())
    assert {k: v["clips"] for k, v in man["splits"].items()} == {"train": 6, "test": 3}
    assert man["sources"]["librispeech"]["input"] == {"train": 6, "test": 3}
    assert man["sources"]["librispeech"]["truecaser"]["model"] == "builtin:truecaser_en"
    name, clips = dataset_clips(str(out))  # what eval reads: the test split
    got = {cid: text for cid, _, text in clips}
    assert sorted(got) == sorted(f"librispeech_{i}" for i in ids["test"])
    assert sorted(got.values()) == [
        "He said nothing at all",
        "I saw the FBI in Paris",
        "John met Mary in London on Monday",
    ]


def test_planner_counts_only_the_recipes_hub_splits():
    from speechlm.plan import hub_files_bytes

    files = [
        ("README.md", 10),
        ("clean/validation/0000.parquet", 300),
        ("clean/test/0000.parquet", 320),
        ("clean/train.100/0000.parquet", 6000),
        ("other/validation/0000.parquet", 280),
    ]
    assert hub_files_bytes(files, "clean", ["validation", "test"]) == 620
    assert hub_files_bytes(files, "clean", ["validation"]) == 300
    # files named by split at the top level, and a layout not named by split (all of the subset)
    flat = [("data/validation-00000-of-00002.parquet", 5), ("data/train-00000-of-00009.parquet", 50)]
    assert hub_files_bytes(flat, "", ["validation"]) == 5
    assert hub_files_bytes([("small/part-0.parquet", 7), ("large/part-0.parquet", 70)], "small", ["dev"]) == 7
