"""python -m speechlm.shard: shipped recipes, one-line errors (exit 2), resume after SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from shard_cli import run_cli
from speechlm.config import REPO_ROOT
from speechlm.shard import ShardRecipe, Source, build, load_recipe

SHIPPED = sorted((REPO_ROOT / "shards").glob("*.yaml"))


def test_shipped_recipes_load():
    names = {p.stem for p in SHIPPED}
    assert {"synthetic", "librispeech", "loquacious_small", "multiasr"} <= names
    for p in SHIPPED:
        recipe, path = load_recipe(p.stem)  # by name, from shards/
        assert path == p.resolve() and recipe.name == p.stem and recipe.sources
    lq, _ = load_recipe("loquacious_small")
    src = lq.sources[0]
    assert (src.kind, src.path, src.subset, src.audio_column, src.text_column) == (
        "hf",
        "speechbrain/LoquaciousSet",
        "small",
        "wav",
        "text",
    )
    assert src.splits == {"train": ["train"], "eval": ["dev"]}
    for name in ("loquacious_small", "librispeech"):  # uppercase corpora: re-cased by default
        r, _ = load_recipe(name)
        assert r.normalize.truecase and r.normalize.truecase_model is None
    mix, _ = load_recipe("multiasr", ["output.shard_clips=50"])
    assert [s.name for s in mix.sources] == ["loquacious", "ami", "spgispeech", "switchboard", "audioset_nonspeech"]
    assert {s.kind for s in mix.sources} == {"hf"} and len({s.weight for s in mix.sources}) >= 3
    assert mix.output.shard_clips == 50 and mix.sources[0].subset == "medium"
    noise = mix.sources[-1]
    assert noise.keep_empty and noise.text_column is None and noise.max_clips == {"train": 20000}
    assert {"Speech", "Singing"} <= set(noise.filters[0].exclude) and noise.filters[0].column == "human_labels"


@pytest.mark.parametrize(
    "recipe,override,needle",
    [
        ({"sources": [{"name": "x", "kind": "synthetic", "synthetc": {}}]}, None, "sources[0].synthetc"),
        ({"sources": [{"name": "x", "kind": "synthetic"}], "output": {"shard_clip": 5}}, None, "output.shard_clip"),
        ({"sources": [{"name": "x", "kind": "hff", "path": "a", "splits": {"train": ["t"]}}]}, None, "sources[0].kind"),
        ({"sources": [{"name": "x", "kind": "synthetic"}]}, "normalize.max_second=3", "normalize.max_second"),
        (
            {"sources": [{"name": "x", "kind": "manifest", "splits": {"dev": ["a.jsonl"]}}]},
            None,
            "sources[0].splits.dev",
        ),
    ],
)
def test_mistyped_recipe_exits_2_with_one_line(tmp_path, recipe, override, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(recipe))
    p = run_cli("--config", path, "--out", tmp_path / "out", *([override] if override else []))
    out, err = p.communicate(timeout=120)
    assert p.returncode == 2, err
    assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def _uppercase_manifest(root: Path, texts: list[str]) -> None:
    rng = np.random.default_rng(0)
    rows = []
    for i, text in enumerate(texts):
        sf.write(root / f"u{i}.flac", (0.1 * rng.standard_normal(16000)).astype("float32"), 16000)
        rows.append(json.dumps({"audio": f"u{i}.flac", "text": text}) + "\n")
    (root / "up.jsonl").write_text("".join(rows))


def test_one_uppercase_source_is_recased_by_the_builtin_model(tmp_path):
    from speechlm.shard import truecase

    _uppercase_manifest(tmp_path, ["JOHN MET MARY IN LONDON ON MONDAY", "I THINK THE FBI CALLED ME"])
    recipe = ShardRecipe(
        name="up", sources=[Source(name="up", kind="manifest", path=str(tmp_path), splits={"train": ["up.jsonl"]})]
    )
    out = build(recipe, tmp_path / "out", workers=1)
    texts = sorted(m["text"] for _, m in _clips(out))
    assert texts == ["I think the FBI called me", "John met Mary in London on Monday"]
    man = json.loads((out / "manifest.json").read_text())
    sha = truecase.file_sha256(out / "truecaser.model")
    assert man["sources"]["up"]["truecaser"] == {"model": "builtin:truecaser_en", "sha256": sha}
    assert man["truecaser"]["model"] == "builtin:truecaser_en" and man["truecaser"]["applied_to"] == ["up"]

    # a named model file overrides the built-in one (and is what the manifest names)
    own = tmp_path / "own.model"
    own.write_text("JOHN (3/3)\nmary (2/2)\n")
    recipe.normalize.truecase_model = str(own)
    out2 = build(recipe, tmp_path / "out2", workers=1)
    assert sorted(m["text"] for _, m in _clips(out2))[1] == "JOHN met mary in london on monday"
    man2 = json.loads((out2 / "manifest.json").read_text())
    assert man2["sources"]["up"]["truecaser"] == {"model": str(own), "sha256": truecase.file_sha256(own)}


def _clips(out: Path):
    for tar in sorted(out.glob("*.tar")):
        with tarfile.open(tar) as t:
            for m in t.getmembers():
                if m.name.endswith(".json"):
                    yield m.name, json.loads(t.extractfile(m).read())


def _manifest_recipe(synthetic_shards: Path, root: Path) -> Path:
    """A manifest source over the fixture's clips (no espeak): many small work chunks."""
    rows = []
    for tar in sorted(synthetic_shards.glob("*-train-*.tar")) + sorted(synthetic_shards.glob("*-eval-*.tar")):
        with tarfile.open(tar) as t:
            for m in t.getmembers():
                if m.name.endswith(".flac"):
                    (root / "audio").mkdir(parents=True, exist_ok=True)
                    (root / "audio" / m.name).write_bytes(t.extractfile(m).read())
                    meta = json.loads(t.extractfile(m.name[:-5] + ".json").read())
                    rows.append({"audio": f"audio/{m.name}", "text": meta["text"], "id": meta["id"]})
    (root / "all.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = {
        "sources": [
            {
                "name": "man",
                "kind": "manifest",
                "path": str(root),
                "id_column": "id",
                "splits": {"train": ["all.jsonl"]},
            }
        ],
        "output": {"shard_clips": 10, "work_chunk": 2},
    }
    (root / "resume.yaml").write_text(yaml.safe_dump(recipe))
    return root / "resume.yaml"


def test_killed_build_resumes_to_identical_shards(synthetic_shards, tmp_path, caplog):
    recipe = _manifest_recipe(synthetic_shards, tmp_path / "in")
    reference = build(recipe, tmp_path / "ref", workers=1)

    out = tmp_path / "killed"
    p = run_cli("--config", recipe, "--out", out, "--workers", "1", start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and len(list((out / ".stage" / "chunks").glob("*.json"))) < 3 and p.poll() is None:
        time.sleep(0.01)
    os.killpg(p.pid, signal.SIGKILL)  # the CLI and any worker it started, mid-build
    p.communicate()
    staged = len(list((out / ".stage" / "chunks").glob("*.json")))
    assert not (out / "manifest.json").exists() and 3 <= staged < 40, "the build was not caught mid-way"

    caplog.set_level("INFO", logger="speechlm.shard")
    build(recipe, out, workers=2)
    assert f"resuming: 0 of 1 source files done, {staged} of 40 chunks of the rest already staged" in caplog.text
    ref = {f.name: f.read_bytes() for f in reference.glob("*.tar")}
    assert len(ref) == 8 and {f.name: f.read_bytes() for f in out.glob("*.tar")} == ref
    assert (out / "manifest.json").read_bytes() == (reference / "manifest.json").read_bytes()
    assert not (out / ".stage").exists() and not list(out.glob(".*.tmp"))

    # a lost shard is rebuilt by the next run, the rest are kept as they are
    (out / "man-train-000003.tar").unlink()
    p = run_cli("--config", recipe, "--out", out, "--workers", "1")
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert {f.name: f.read_bytes() for f in out.glob("*.tar")} == ref
