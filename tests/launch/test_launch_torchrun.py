"""launch/torchrun.sh: two torchrun agents (2 nodes x 1 process, c10d rendezvous) train the same
losses as one agent with 2 processes, for the same global batch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from paths import REPO
from tests.infra.daemons import free_port

STEPS = 6


def agents(tmp: Path, name: str, shards: Path, nnodes: int, nproc: int) -> list[float]:
    port = free_port()
    args = [
        "bash",
        str(REPO / "launch" / "torchrun.sh"),
        "--config",
        "tiny",
        f"data.train=[{{path: {shards}, split: train}}]",
        "data.eval=[]",
        "data.num_workers=0",
        f"training.output_dir={tmp}",
        f"training.run_name={name}",
        f"training.max_steps={STEPS}",
        "training.logging_steps=1",
        "training.save_steps=1000",
        "training.eval_steps=1000",
        "training.per_device_train_batch_size=4",
    ]
    procs = []
    try:
        for node in range(nnodes):
            env = dict(
                os.environ,
                NNODES=str(nnodes),
                NODE_RANK=str(node),
                NPROC_PER_NODE=str(nproc),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                RDZV_ID=f"{name}-{port}",
            )
            log = open(tmp / f"{name}-node{node}.log", "w")
            procs.append(
                subprocess.Popen(args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            )
        for p in procs:
            assert p.wait(timeout=600) == 0, (tmp / f"{name}-node{procs.index(p)}.log").read_text()[-3000:]
    finally:
        for p in procs:  # on a failure or timeout, end the agents and their workers (own session)
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    rows = [json.loads(line) for line in (tmp / name / "metrics.jsonl").read_text().splitlines()]
    first = next(r for r in rows if "world_size" in r)
    assert first["world_size"] == 2 and first["effective_batch_size"] == 8
    return [r["train/loss"] for r in rows if "train/loss" in r]


@pytest.mark.slow
def test_two_agents_match_one_agent_two_processes(tmp_path, synthetic_shards):
    single = agents(tmp_path, "one-node", synthetic_shards, nnodes=1, nproc=2)
    multi = agents(tmp_path, "two-nodes", synthetic_shards, nnodes=2, nproc=1)
    assert len(single) == len(multi) == STEPS
    assert multi == pytest.approx(single, rel=1e-5, abs=1e-6)
