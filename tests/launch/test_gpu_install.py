"""The [gpu] extra's installation: make setup, runpod deploy and slurm/setup.sh go through one
script that installs each kernel on its own. Run with a stand-in `nvidia-smi` on PATH and a
stand-in python whose pip fails for two kernels the way source builds fail without nvcc, so
nothing CUDA is installed into this CPU venv."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import tomllib

from paths import REPO

SCRIPT = REPO / "launch" / "install_gpu_kernels.sh"


def gpu_extra() -> list[str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]


def script_kernels() -> list[str]:
    line = next(x for x in SCRIPT.read_text().splitlines() if x.startswith("KERNELS=("))
    return shlex.split(line[len("KERNELS=(") : -1])


def stand_in_bin(tmp: Path, nvidia: bool) -> Path:
    b = tmp / "bin"
    b.mkdir(exist_ok=True)
    if nvidia:
        (b / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: stand-in'\n")
    (b / "python").write_text(f"""#!/bin/bash
# a CUDA image's python: torch imports; pip records each call and fails the two source builds
if [[ $1 == -c ]]; then echo 2.9.1+cu128; exit 0; fi
echo "$*" >> {tmp}/pip-calls
case "$*" in
  *causal-conv1d*) echo "Guessing wheel URL: https://github.com/..."; echo "Precompiled wheel not found. Building from source..."
                   echo "error: [Errno 2] No such file or directory: '/usr/local/cuda/bin/nvcc'"
                   echo "note: This error originates from a subprocess, and is likely not a problem with pip."; exit 1;;
  *flash-attn*) sleep 5; exit 0;;
esac
exit 0
""")  # noqa: E501
    for f in b.iterdir():
        f.chmod(0o755)
    return b


def run_script(tmp: Path, nvidia: bool, **env) -> subprocess.CompletedProcess:
    b = stand_in_bin(tmp, nvidia)
    return subprocess.run(
        ["bash", str(SCRIPT), str(b / "python")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": f"{b}:/usr/bin:/bin", "GPU_KERNELS_LOG_DIR": str(tmp / "logs"), **env},
    )


def test_script_installs_the_pyproject_gpu_extra():
    assert script_kernels() == gpu_extra()
    assert [re.split("[<>=]", k)[0] for k in gpu_extra()] == [
        "liger-kernel",
        "flash-linear-attention",
        "causal-conv1d",
        "flash-attn",
    ]


def test_each_kernel_separately_failures_reported_and_the_rest_go_on(tmp_path):
    r = run_script(tmp_path, nvidia=True, GPU_KERNELS_TIMEOUT="2")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "causal-conv1d FAILED: error: [Errno 2] No such file or directory: '/usr/local/cuda/bin/nvcc'" in out
    assert "flash-attn FAILED: timed out after 2 s" in out
    assert "installed: liger-kernel flash-linear-attention; failed: causal-conv1d flash-attn" in out
    calls = [c for c in (tmp_path / "pip-calls").read_text().splitlines() if c.endswith(tuple(gpu_extra()))]
    assert [c.split()[-1] for c in calls] == gpu_extra()  # one pip call per kernel, in order
    for c in calls:  # the image's CUDA torch is pinned; source builds use it (no build isolation)
        assert "-c " in c and ("--no-build-isolation" in c) == any(k in c for k in ("causal-conv1d", "flash-attn"))
    assert (tmp_path / "logs" / "constraints.txt").read_text().strip() == "torch==2.9.1+cu128"


def test_no_nvidia_smi_installs_nothing(tmp_path):
    r = run_script(tmp_path, nvidia=False)
    assert r.returncode == 0 and "not a CUDA machine" in r.stdout and not (tmp_path / "pip-calls").exists()


@pytest.mark.parametrize("nvidia", [True, False])
def test_make_setup_installs_the_extra_only_with_nvidia_smi(tmp_path, nvidia):
    b = stand_in_bin(tmp_path, nvidia)
    r = subprocess.run(
        ["make", "-n", "-B", "setup"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": f"{b}:{os.environ['PATH']}"},
    )
    assert r.returncode == 0, r.stderr
    assert ("bash launch/install_gpu_kernels.sh .venv/bin/python" in r.stdout) == nvidia
    assert "pip install -q torch==2.13.0" in r.stdout  # the CPU pin stays a run-time check


def test_runpod_deploy_and_slurm_setup_use_the_script():
    from speechlm import runpod

    deps = runpod.deps_script("/workspace/speechlm")
    assert "pip install -q -e '.[dev]'; bash launch/install_gpu_kernels.sh .venv/bin/python;" in deps
    slurm = (REPO / "slurm" / "setup.sh").read_text()
    assert "bash launch/install_gpu_kernels.sh .venv/bin/python" in slurm
    assert subprocess.run(["bash", "-n", str(REPO / "slurm" / "setup.sh")]).returncode == 0
