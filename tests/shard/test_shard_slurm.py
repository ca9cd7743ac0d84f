"""slurm/shard.sh against a real one-machine Slurm (slurm-wlm + munge, started by the test): a
3-task array job builds the parts, the dependent merge job writes the manifest, and the set is
the same, tar for tar, as a one-machine build of the recipe."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from paths import REPO
from test_shard_scale import corpus, recipe_file, tars  # noqa: F401  (corpus: a fixture)
from tests.infra import slurm as slurm_infra

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(slurm_infra.available() is not None, reason=str(slurm_infra.available())),
]


def job_states(env, job: str) -> list[str]:
    r = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True, text=True, timeout=30)
    return [w.split("=", 1)[1] for w in r.stdout.split() if w.startswith("JobState=")] or ["GONE"]


def test_array_job_then_merge_equals_one_machine_build(corpus, tmp_path):  # noqa: F811
    from speechlm.shard import build

    root, _, _ = corpus
    os.chmod(tmp_path, 0o755)
    recipe = recipe_file(root, tmp_path)
    one = build(recipe, tmp_path / "one", workers=1)
    out = tmp_path / "slurm-out"
    with slurm_infra.cluster(tmp_path / "daemons", cpus=2) as env:
        env = dict(env, SBATCH_CPUS_PER_TASK="1")
        r = subprocess.run(
            ["slurm/shard.sh", "submit", "3", "--config", str(recipe), "--out", str(out)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        words = r.stdout.split()
        array, merge = words[1], words[-1]
        deadline = time.time() + 600
        while time.time() < deadline and job_states(env, merge)[0] in ("PENDING", "RUNNING", "CONFIGURING"):
            time.sleep(2)
        logs = "".join(p.read_text() for p in sorted(REPO.glob(f"slurm-speechlm-shard*-{array}_*.out")))
        merge_log = REPO / f"slurm-speechlm-shard-merge-{merge}.out"
        merged = merge_log.read_text() if merge_log.is_file() else ""
        assert job_states(env, merge) == ["COMPLETED"], logs[-3000:] + merged[-2000:]
    for p in list(REPO.glob(f"slurm-speechlm-shard*-{array}_*.out")) + [merge_log]:
        p.unlink(missing_ok=True)
    for i in range(3):
        assert f"task {i} of 3" in logs
    assert tars(out) == tars(one) and (out / "manifest.json").read_bytes() == (one / "manifest.json").read_bytes()
