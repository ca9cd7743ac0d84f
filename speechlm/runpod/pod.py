"""The pod itself, through runpodctl: size it from the plan, create it, wait for its SSH port, stop
or remove it. `plan` and `up` import the planner (torch) only when they run."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time

from speechlm.config import Config, ConfigError, load

DEFAULT_IMAGE = "runpod/pytorch:2.8.0-py3.11-cuda12.8.1-cudnn-devel-ubuntu22.04"


def cmd_plan(a) -> int:
    from speechlm.plan import make_plan, recommend, report  # torch: the pod commands start without it

    plan = make_plan(load(Config, a.config, a.experiment, a.overrides), world=a.world_size)
    print(json.dumps(plan, indent=1) if a.json else report(plan))
    rec = recommend(plan)
    if rec and not a.json:
        disk_gb = plan["disk_bytes"]["total"] / 1e9
        print(
            f"\nrecommended: {rec['gpu']} ('{rec['runpod_id']}'), container disk >= {disk_gb * 1.2:.0f} GB (plan + 20%)"
        )
    return 0


def up_command(a) -> list[str]:
    from speechlm.plan import make_plan, recommend  # torch: the pod commands start without it

    plan = make_plan(load(Config, a.config, a.experiment, a.overrides), world=a.gpu_count)
    rec = recommend(plan)
    gpu = a.gpu_type or (rec and rec["runpod_id"])
    if not gpu:
        raise ConfigError("no GPU in the catalog fits this config; pass --gpu-type or lower the batch")
    disk_gb = a.disk_gb or int(plan["disk_bytes"]["total"] / 1e9 * 1.2) + 10
    return [
        "runpodctl",
        "create",
        "pod",
        "--name",
        a.name,
        "--gpuType",
        gpu,
        "--gpuCount",
        str(a.gpu_count),
        "--imageName",
        a.image,
        "--containerDiskSize",
        str(disk_gb),
        "--volumeSize",
        "0",
        "--ports",
        "22/tcp",
        "--secureCloud" if not a.community else "--communityCloud",
    ]


def cmd_up(a) -> int:
    cmd = up_command(a)
    if a.dry_run:
        print(shlex.join(cmd))
        return 0
    r = subprocess.run(cmd, text=True, capture_output=True)
    print(r.stdout.strip())
    if r.returncode:
        raise SystemExit(f"error: runpodctl failed: {r.stderr.strip()}")
    pod = re.search(r'pod "?([a-z0-9]+)"? created', r.stdout)
    if pod:
        print(f"next: {a.prog} wait {pod.group(1)}")
    return 0


SSH_PORT = re.compile(r"(\d+\.\d+\.\d+\.\d+):(\d+)->22\b")


def cmd_wait(a) -> int:
    deadline = time.time() + a.timeout
    while time.time() < deadline:
        r = subprocess.run(["runpodctl", "get", "pod", a.pod, "--allfields"], text=True, capture_output=True)
        if r.returncode:
            raise SystemExit(f"error: runpodctl get pod {a.pod}: {r.stderr.strip()}")
        m = SSH_PORT.search(r.stdout)
        if m:
            print(f"{m.group(1)} {m.group(2)}")
            print(f"next: {a.prog} deploy {m.group(1)} {m.group(2)}", file=sys.stderr)
            return 0
        time.sleep(a.interval)
    raise SystemExit(f"error: pod {a.pod} exposed no SSH port within {a.timeout} s")


def cmd_down(a) -> int:
    cmd = ["runpodctl", "stop" if a.stop else "remove", "pod", a.pod]
    if a.dry_run:
        print(shlex.join(cmd))
        return 0
    return subprocess.run(cmd).returncode
