#!/usr/bin/env bash
# Train under Slurm: one srun task per node, each starting one torchrun agent (launch/torchrun.sh)
# that rendezvouses on the job's first node.
#
#   sbatch slurm/train.sh --config production [--experiment E] [key=value ...]
#   sbatch --nodes 4 --gpus-per-node 8 slurm/train.sh --config production     # sizes on the command line
#
# Set up once with slurm/setup.sh on a GPU node (venv + the [gpu] extra's kernels).
# Submit from the repository root (or set SPEECHLM_ROOT). Logs: slurm-<job name>-<job id>.out in the
# submit dir, appended across requeues, plus the run's metrics.jsonl.
# Pre-emption: Slurm sends USR1 to this script N seconds before the time limit (--signal=B:USR1@N);
# it is passed to torchrun, which passes it to the trainer, which checkpoints at the next step and
# exits; this script then requeues the job, and the new run resumes (resume_from_checkpoint=auto).
# `scontrol requeue` (SIGTERM to the job) takes the same path: the trainer saves within KillWait.
# A requeue that lands on another node count (or GPUs per node) resumes elastically: the optimizer
# state is converted to DeepSpeed's universal checkpoint, the effective batch and the data order
# are kept (README, "Resuming on a different number of GPUs").
#SBATCH --job-name=speechlm
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --output=slurm-%x-%j.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --signal=B:USR1@300
##SBATCH --gpus-per-node=8
##SBATCH --time=24:00:00
set -uo pipefail

ROOT=${SPEECHLM_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}
cd "$ROOT" || exit 1
[[ -f launch/torchrun.sh ]] || { echo "[slurm] $ROOT is not a speechlm checkout (set SPEECHLM_ROOT)" >&2; exit 2; }

MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR
export MASTER_PORT=${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 20000))}
export NNODES=${SLURM_JOB_NUM_NODES:-1}
export RDZV_ID=slurm-${SLURM_JOB_ID}
# GPUs per node from --gpus-per-node (SLURM_GPUS_ON_NODE), else what the node shows, else 1 (CPU)
export NPROC_PER_NODE=${NPROC_PER_NODE:-${SLURM_GPUS_ON_NODE:-}}
RUN_NAME=${RUN_NAME:-${SLURM_JOB_NAME}-${SLURM_JOB_ID}}
echo "[slurm] job ${SLURM_JOB_ID} (restart ${SLURM_RESTART_COUNT:-0}) on ${SLURM_JOB_NODELIST}: ${NNODES} nodes, rendezvous ${MASTER_ADDR}:${MASTER_PORT}"

requeue=0
pid=
on_usr1() { echo "[slurm] USR1: checkpoint, exit, requeue"; requeue=1; [[ -n $pid ]] && kill -USR1 "$pid"; }
on_term() { echo "[slurm] TERM: checkpoint and exit"; [[ -n $pid ]] && kill -TERM "$pid"; }
trap on_usr1 USR1
trap on_term TERM

# the run name stays fixed across requeues so `auto` finds this job's checkpoints; the user's win
args=("$@")
[[ " $* " == *" training.run_name="* ]] || args+=("training.run_name=${RUN_NAME}")
[[ " $* " == *" training.resume_from_checkpoint="* ]] || args+=(training.resume_from_checkpoint=auto)
srun --ntasks-per-node=1 --kill-on-bad-exit=1 \
  bash -c 'NODE_RANK=$SLURM_NODEID exec launch/torchrun.sh "$@"' torchrun "${args[@]}" &
pid=$!
# `wait` returns early when a trapped signal arrives; keep waiting until srun itself is done
rc=0
while :; do
  wait "$pid"; rc=$?
  kill -0 "$pid" 2>/dev/null || break
done
echo "[slurm] training exited with status ${rc}"
if [[ $requeue == 1 ]]; then
  echo "[slurm] requeueing job ${SLURM_JOB_ID}"
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$rc"
