"""launch/runpod.py: runpodctl commands by dry run; the SSH steps for real against an sshd on
127.0.0.1 (deploy, train the tiny demo in tmux, read its logs, find its checkpoint)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from paths import REPO
from synthetic_set import SYNTHETIC_SIZES
from tests.infra import sshd as sshd_infra

ROOT = REPO
RUNPOD = [sys.executable, str(ROOT / "launch" / "runpod.py")]


def runpod(*args, env=None, timeout=180) -> subprocess.CompletedProcess:
    return subprocess.run(
        RUNPOD + list(args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_up_dry_run_sizes_the_pod_from_the_plan():
    r = runpod("up", "--dry-run", "--name", "asr1")
    assert r.returncode == 0, r.stderr
    cmd = shlex.split(r.stdout.strip().splitlines()[-1])
    assert cmd[:3] == ["runpodctl", "create", "pod"]
    flags = dict(zip(cmd[3::2], cmd[4::2]))
    # the default plan recommends the smallest card that fits batch 256 as configured, else the
    # card needing the least accumulation: its RunPod id goes to --gpuType
    assert flags["--name"] == "asr1" and flags["--gpuType"] in ("NVIDIA H200", "NVIDIA B200")
    assert int(flags["--containerDiskSize"]) >= 20 and flags["--ports"] == "22/tcp"


def test_up_dry_run_honours_gpu_type_and_smaller_batch():
    r = runpod(
        "up",
        "--dry-run",
        "--gpu-type",
        "NVIDIA H100 80GB HBM3",
        "--disk-gb",
        "150",
        "training.per_device_train_batch_size=32",
        "training.gradient_accumulation_steps=8",
    )
    assert r.returncode == 0, r.stderr
    assert "--gpuType 'NVIDIA H100 80GB HBM3'" in r.stdout and "--containerDiskSize 150" in r.stdout


def test_down_dry_run_and_bad_key():
    assert runpod("down", "pod123", "--dry-run").stdout.strip() == "runpodctl remove pod pod123"
    assert runpod("down", "pod123", "--stop", "--dry-run").stdout.strip() == "runpodctl stop pod pod123"
    r = runpod("up", "--dry-run", "training.per_device_batch=3")
    assert r.returncode == 2 and "per_device_batch" in r.stderr and "Traceback" not in r.stderr


def test_plan_recommends_a_gpu_and_disk():
    r = runpod("plan", "training.per_device_train_batch_size=32", "training.gradient_accumulation_steps=8")
    assert r.returncode == 0, r.stderr
    assert "recommended:" in r.stdout and "container disk >=" in r.stdout


# --------------------------------------------------------------------------- real SSH round trip


@pytest.mark.slow
@pytest.mark.skipif(sshd_infra.available() is not None, reason=str(sshd_infra.available()))
def test_ssh_deploy_train_logs_checkpoint(tmp_path):
    remote_dir = tmp_path / "pod" / "speechlm"
    # the pod side: this machine with the project's venv; offline like every test
    with sshd_infra.sshd(tmp_path / "ssh", env={"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}) as s:
        conn = s.cli_args() + ["--remote-dir", str(remote_dir), "--python", sys.executable, "--session", "t"]
        r = runpod("deploy", *conn, "--skip-setup", "--skip-deps")
        assert r.returncode == 0, r.stderr
        assert (remote_dir / "launch" / "train.py").is_file() and not (remote_dir / ".venv").exists()

        # the pod has no shards: the trainer builds them from data.recipe, as on a fresh pod (the shipped
        # recipe scaled down to the session set's sizes: the build, not its 3,000 clips, is under test)
        recipe = yaml.safe_load((ROOT / "shards" / "synthetic.yaml").read_text())
        recipe["sources"][0]["synthetic"].update({**SYNTHETIC_SIZES, "unseen_test": 0})
        (tmp_path / "small.yaml").write_text(yaml.safe_dump(recipe))
        shards = tmp_path / "pod-shards"
        data = [
            f"data.recipe={tmp_path / 'small.yaml'}",
            f"data.train=[{{path: {shards}, split: train}}]",
            f"data.eval=[{{path: {shards}, split: eval}}]",
        ]
        secret = "hf_" + uuid.uuid4().hex  # made here: the synced sources can't contain it
        try:
            r = runpod(
                "train",
                *conn,
                "--config",
                "tiny",
                "--no-attach",
                "--gpus",
                "1",
                "training.max_steps=12",
                "training.save_steps=6",
                "training.eval_steps=1000",
                "training.logging_steps=2",
                "training.run_name=pod",
                *data,
                env={"HF_TOKEN": secret},
            )
            assert r.returncode == 0, r.stderr
            assert secret not in r.stdout + r.stderr
            log = remote_dir / "logs" / "t.log"
            deadline = time.time() + 420
            while time.time() < deadline and "[speechlm] training exited" not in (
                log.read_text() if log.is_file() else ""
            ):
                time.sleep(3)
            text = log.read_text()
            assert "[speechlm] training exited" in text, text[-3000:]
            assert "checkpoint step 12" in text
            assert f"building missing shards {shards}" in text and (shards / "manifest.json").is_file()

            r = runpod("attach", *conn, "--logs", "--lines", "5")
            assert r.returncode == 0 and "[speechlm] training exited" in r.stdout
            assert "effective batch" not in r.stdout  # an early line: only the tail was printed
            assert "effective batch" in runpod("attach", *conn, "--logs", "--lines", "100000").stdout
            r = runpod("checkpoint", *conn)
            assert r.returncode == 0, r.stderr
            ckpt = Path(r.stdout.strip())
            assert ckpt == remote_dir / "outputs" / "pod" / "checkpoints" / "step-12"
            assert (ckpt / "trainer_state.json").is_file()
            # the secret reached no file the run wrote
            for f in remote_dir.rglob("*"):
                if f.is_file() and f.stat().st_size < 5_000_000:
                    assert secret.encode() not in f.read_bytes(), f
        finally:
            subprocess.run(["tmux", "-L", "speechlm", "kill-server"], capture_output=True)
