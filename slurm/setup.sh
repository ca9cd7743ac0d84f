#!/usr/bin/env bash
# One-time environment for slurm/train.sh on the cluster's shared filesystem: the project's venv
# and, where the node has GPUs, the [gpu] extra's kernels one at a time (launch/install_gpu_kernels.sh:
# a kernel that fails is reported with its reason and the rest go in). Run it on a GPU node, so
# causal-conv1d and flash-attn match the nodes' torch and CUDA:
#
#   srun --nodes 1 --gpus-per-node 1 --time 2:00:00 bash slurm/setup.sh
#
# A venv that sees the system's (module-loaded) CUDA torch keeps it; otherwise pip brings PyPI's.
set -euo pipefail
ROOT=${SPEECHLM_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}
cd "$ROOT"
[[ -f launch/install_gpu_kernels.sh ]] || { echo "[slurm setup] $ROOT is not a speechlm checkout (set SPEECHLM_ROOT)" >&2; exit 2; }
test -x .venv/bin/python || python3 -m venv --system-site-packages .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
bash launch/install_gpu_kernels.sh .venv/bin/python
.venv/bin/python -c 'import torch; print("[slurm setup] torch", torch.__version__, "cuda", torch.cuda.is_available())'
