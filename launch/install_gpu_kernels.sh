#!/usr/bin/env bash
# Install the `gpu` extra of pyproject.toml on a CUDA machine, one kernel at a time: a kernel that
# fails is reported with its reason and the others still go in (the trainer then runs transformers'
# torch fallback for it and says so at start). Used by `make setup`, `launch/runpod.py deploy` and
# `slurm/setup.sh`.
#
#   bash launch/install_gpu_kernels.sh [PYTHON]      # default .venv/bin/python, else python3
#
# Without nvidia-smi it installs nothing. It never replaces the machine's torch (a CUDA build that
# came with the image): every pip call is constrained to the installed torch version.
# liger-kernel and flash-linear-attention are pure-Python wheels (triton kernels, compiled at run
# time). causal-conv1d and flash-attn are source distributions on PyPI: their setup.py downloads a
# prebuilt wheel for this torch / CUDA / Python / C++ ABI from the project's GitHub releases, else
# compiles with nvcc (needs the CUDA toolkit; flash-attn takes long: set MAX_JOBS). They are built
# against the installed torch (--no-build-isolation), and each pip call is cut off after
# GPU_KERNELS_TIMEOUT seconds (default 1800). Logs: GPU_KERNELS_LOG_DIR (default a temp dir).
# Exit status 0 even when kernels fail; 2 when PYTHON can't import torch.
set -uo pipefail

# keep in step with [project.optional-dependencies] gpu (tests/launch/test_gpu_install.py checks)
KERNELS=("liger-kernel>=0.8.5" "flash-linear-attention>=0.6.0" "causal-conv1d>=1.5.0" "flash-attn>=2.7.0")
SOURCE_BUILDS=" causal-conv1d flash-attn "
TIMEOUT=${GPU_KERNELS_TIMEOUT:-1800}

PY=${1:-.venv/bin/python}
[[ -x $PY ]] || PY=$(command -v python3)
say() { echo "[gpu kernels] $*"; }

if ! command -v nvidia-smi >/dev/null 2>&1; then
  say "no nvidia-smi: not a CUDA machine, nothing to install"
  exit 0
fi
if ! torch_version=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null); then
  say "$PY cannot import torch: install the project first (pip install -e .)" >&2
  exit 2
fi
logdir=${GPU_KERNELS_LOG_DIR:-$(mktemp -d -t gpu-kernels.XXXXXX)}
mkdir -p "$logdir"
constraints=$logdir/constraints.txt
echo "torch==$torch_version" >"$constraints"

# a failed pip run's reason: its last error line (not pip's generic footer), else its last line
reason() {
  local r
  r=$(grep -E '(^|[^a-z])([Ee]rror|ERROR)[: ]' "$1" | grep -vE 'subprocess-exited-with-error|This error originates|^ *(note|hint):|See above' | tail -n 1)
  [[ -n $r ]] || r=$(grep -v '^\s*$' "$1" | tail -n 1)
  echo "${r:-no output}" | sed -E 's/^ +//' | cut -c1-300
}

installed=() failed=()
for spec in "${KERNELS[@]}"; do
  name=${spec%%[<>=!~ ]*}
  args=(-m pip install -c "$constraints")
  if [[ $SOURCE_BUILDS == *" $name "* ]]; then
    args+=(--no-build-isolation)  # builds against this torch; its setup.py needs these at build time
    "$PY" -m pip install -q -c "$constraints" packaging ninja wheel psutil >/dev/null 2>&1
  fi
  say "installing $spec (torch $torch_version)"
  timeout "$TIMEOUT" "$PY" "${args[@]}" "$spec" >"$logdir/$name.log" 2>&1
  rc=$?
  if [[ $rc == 0 ]]; then
    installed+=("$name")
  else
    why=$(reason "$logdir/$name.log")
    [[ $rc == 124 ]] && why="timed out after ${TIMEOUT} s (GPU_KERNELS_TIMEOUT)"
    failed+=("$name")
    say "$name FAILED: $why (log: $logdir/$name.log); training goes on without it"
  fi
done
say "installed: ${installed[*]:-none}; failed: ${failed[*]:-none}"
exit 0
