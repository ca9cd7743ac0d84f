#!/usr/bin/env bash
# One torchrun agent per node; the agents meet through c10d rendezvous on MASTER_ADDR:MASTER_PORT.
#
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=node0 MASTER_PORT=29500 NPROC_PER_NODE=8 \
#       launch/torchrun.sh --config production [--experiment E] [key=value ...]
#
# Every argument is passed through to launch/train.py. Defaults give one node with every visible
# GPU (or one process on a CPU machine). RDZV_ID names the job (Slurm passes its job id) so agents
# of different jobs never join each other. PYTHON picks the interpreter (default: .venv or python3).
# Restarted with other NNODES / NPROC_PER_NODE on a run with training.resume_from_checkpoint=auto,
# it resumes elastically (README, "Resuming on a different number of GPUs").
set -euo pipefail
cd "$(dirname "$0")/.."

NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
MASTER_PORT=${MASTER_PORT:-29500}
RDZV_ID=${RDZV_ID:-speechlm-${MASTER_ADDR}-${MASTER_PORT}}
if [[ -z "${NPROC_PER_NODE:-}" ]]; then
  NPROC_PER_NODE=$(nvidia-smi -L 2>/dev/null | wc -l || true)
  [[ "${NPROC_PER_NODE:-0}" -gt 0 ]] || NPROC_PER_NODE=1
fi
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# torchrun forwards these to the workers (Slurm's --signal=B:USR1@N included); the trainer then
# checkpoints at the next step boundary and exits, within SHUTDOWN_TIMEOUT before a SIGKILL.
SIGNALS=${SIGNALS:-SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1}
SHUTDOWN_TIMEOUT=${SHUTDOWN_TIMEOUT:-600}

echo "[torchrun.sh] node ${NODE_RANK}/${NNODES} x ${NPROC_PER_NODE} procs, rendezvous ${MASTER_ADDR}:${MASTER_PORT} (${RDZV_ID})" >&2
# exec: torchrun receives the signals itself (Slurm's USR1/TERM) and forwards them to the workers
exec "$PYTHON" -m torch.distributed.run \
  --nnodes="$NNODES" \
  --nproc-per-node="$NPROC_PER_NODE" \
  --node-rank="$NODE_RANK" \
  --rdzv-backend=c10d \
  --rdzv-endpoint="${MASTER_ADDR}:${MASTER_PORT}" \
  --rdzv-id="$RDZV_ID" \
  --max-restarts=0 \
  --shutdown-timeout="$SHUTDOWN_TIMEOUT" \
  --signals-to-handle="$SIGNALS" \
  launch/train.py "$@"
