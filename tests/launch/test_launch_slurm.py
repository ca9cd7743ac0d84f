"""slurm/train.sh against a real one-machine Slurm (slurm-wlm + munge, started by the test):
a tiny job runs to completion; a requeued job (scontrol requeue, then the USR1 pre-emption path)
checkpoints, comes back and resumes where it stopped."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from paths import REPO
from tests.infra import slurm as slurm_infra

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(slurm_infra.available() is not None, reason=str(slurm_infra.available())),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("slurm")
    os.chmod(tmp, 0o755)
    with slurm_infra.cluster(tmp / "daemons", kill_wait=90) as env:
        yield env, tmp


def sbatch(env, tmp: Path, name: str, shards: Path, *overrides: str) -> str:
    cmd = [
        "sbatch",
        "--parsable",
        "--job-name",
        name,
        "--output",
        str(tmp / "%x-%j.out"),
        "slurm/train.sh",
        "--config",
        "tiny",
        f"data.train=[{{path: {shards}, split: train}}]",
        "data.eval=[]",
        "data.num_workers=0",
        f"training.output_dir={tmp / 'runs'}",
        "training.logging_steps=1",
        "training.eval_steps=100000",
        *overrides,
    ]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split(";")[0]


def job_state(env, job: str) -> str:
    r = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True, text=True, timeout=30)
    for word in r.stdout.split():
        if word.startswith("JobState="):
            return word.split("=", 1)[1]
    return "GONE"


def start_now_when_pending(env, job: str) -> bool:
    """Slurm holds a requeued job back for a while (BeginTime); the test lets it start at once."""
    if job_state(env, job) != "PENDING":
        return False
    # a job that requeued itself is PENDING while its old batch script is still exiting; a start forced
    # then is killed by Slurm ("Killing non-startable batch job: Job credential revoked")
    if subprocess.run(["pgrep", "-f", f"slurmstepd: \\[{job}\\.batch\\]"], capture_output=True).returncode == 0:
        return False
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=env, capture_output=True, timeout=30)
    return True


def wait_until(pred, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(2)
    raise AssertionError(f"timed out waiting for {what}")


def metrics(run: Path) -> list[dict]:
    f = run / "metrics.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines()] if f.is_file() else []


def last_step(run: Path) -> int:
    return max([r["step"] for r in metrics(run) if "train/loss" in r] or [0])


def test_sbatch_tiny_job_completes(cluster, synthetic_shards):
    env, tmp = cluster
    job = sbatch(env, tmp, "done", synthetic_shards, "training.max_steps=8", "training.save_steps=4")
    wait_until(lambda: job_state(env, job) in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), 600, f"job {job}")
    log = (tmp / f"done-{job}.out").read_text()
    assert job_state(env, job) == "COMPLETED", log[-3000:]
    assert "training exited with status 0" in log
    run = tmp / "runs" / f"done-{job}"  # the script's default run name: <job name>-<job id>
    assert (run / "checkpoints" / "latest").read_text().strip() == "step-8"


def test_requeued_job_resumes_where_it_stopped(cluster, synthetic_shards):
    env, tmp = cluster
    job = sbatch(env, tmp, "requeue", synthetic_shards, "training.max_steps=40", "training.save_steps=1000")
    run = tmp / "runs" / f"requeue-{job}"
    log = tmp / f"requeue-{job}.out"
    # 1) an operator's `scontrol requeue`: SIGTERM to the job -> checkpoint at the next step, exit
    wait_until(lambda: last_step(run) >= 8, 600, "step 8")
    assert subprocess.run(["scontrol", "requeue", job], env=env, capture_output=True, text=True).returncode == 0
    wait_until(lambda: start_now_when_pending(env, job), 300, "the requeued job to pend")
    wait_until(lambda: "restart 1" in (log.read_text() if log.is_file() else ""), 600, "the requeued run")
    stopped = int((run / "checkpoints" / "latest").read_text().strip().split("-")[1])
    assert 8 <= stopped < 40
    # 2) pre-emption: Slurm's --signal=B:USR1 goes to the batch script, which passes it on and
    # requeues the job itself once the trainer has saved and exited
    wait_until(lambda: last_step(run) >= stopped + 8, 600, "progress after the resume")
    subprocess.run(["scancel", "--signal=USR1", "--batch", job], env=env, check=True, timeout=30)
    wait_until(lambda: start_now_when_pending(env, job), 300, "the script's requeue")
    wait_until(lambda: "restart 2" in log.read_text(), 600, "the second requeue")
    wait_until(lambda: job_state(env, job) in ("COMPLETED", "FAILED", "CANCELLED"), 600, f"job {job} to end")
    text = log.read_text()
    assert job_state(env, job) == "COMPLETED", text[-3000:]
    assert "USR1: checkpoint, exit, requeue" in text and "training exited with status 0" in text
    # the trainer saved at the step the signal arrived, so across three runs every step was
    # trained exactly once, and each resume started from the checkpoint the stop left behind
    steps = [r["step"] for r in metrics(run) if "train/loss" in r]
    assert steps == list(range(1, 41))
    resumed = [line for line in text.splitlines() if "resumed from" in line]
    assert len(resumed) == 2 and f"step-{stopped} at step {stopped}" in resumed[0]
    assert (run / "checkpoints" / "latest").read_text().strip() == "step-40"
