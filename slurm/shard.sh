#!/usr/bin/env bash
# Build a shard set as a Slurm array job: array task I of N builds its part of the recipe (whole
# source files: each task reads only its own), then a job that depends on the whole array merges
# the parts into the one manifest.json. The output folder must be on storage every node sees.
#
#   slurm/shard.sh submit 8 --config multiasr --out /shared/shards/multiasr [key=value ...]
#       submits both jobs (array 0-7, then the merge with --dependency=afterok) and prints their ids;
#       SBATCH_* variables (SBATCH_PARTITION, SBATCH_TIMELIMIT, ...) pass options to both
#   sbatch --array=0-7 slurm/shard.sh --config multiasr --out DIR     # the array alone
#   sbatch --dependency=afterok:JOB slurm/shard.sh merge DIR         # and its merge
#
# Submit from the repository root (or set SPEECHLM_ROOT). A task killed or requeued resumes at
# the source file where it stopped; the first task to start makes the shared plan (labels,
# truecaser) and the others wait for it. Workers per task: --cpus-per-task, else all cores.
#SBATCH --job-name=speechlm-shard
#SBATCH --output=slurm-%x-%A_%a.out
#SBATCH --ntasks=1
#SBATCH --requeue
set -euo pipefail

ROOT=${SPEECHLM_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}
cd "$ROOT" || exit 1
[[ -d speechlm/shard ]] || { echo "[shard] $ROOT is not a speechlm checkout (set SPEECHLM_ROOT)" >&2; exit 2; }
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

case "${1:-}" in
  submit)
    n=${2:?usage: slurm/shard.sh submit N --config R --out DIR [key=value ...]}
    shift 2
    [[ " $* " == *" --out "* ]] || { echo "[shard] submit needs --out DIR (shared by all nodes)" >&2; exit 2; }
    out=$(sed -E 's/.* --out ([^ ]+).*/\1/' <<<" $* ")
    array=$(sbatch --parsable --array="0-$((n - 1))" "$0" "$@")
    array=${array%%;*}
    merge=$(sbatch --parsable --job-name=speechlm-shard-merge --output=slurm-%x-%j.out \
      --dependency="afterok:${array}" "$0" merge "$out")
    echo "array ${array} (${n} tasks), merge ${merge%%;*}"
    ;;
  merge)
    shift
    exec "$PYTHON" -m speechlm.shard merge "$@"
    ;;
  *)
    : "${SLURM_ARRAY_TASK_ID:?run under sbatch --array (or: slurm/shard.sh submit N ...)}"
    first=${SLURM_ARRAY_TASK_MIN:-0}
    count=${SLURM_ARRAY_TASK_COUNT:-$((SLURM_ARRAY_TASK_MAX - first + 1))}
    index=$((SLURM_ARRAY_TASK_ID - first))
    echo "[shard] array job ${SLURM_ARRAY_JOB_ID} task ${index} of ${count} on $(hostname)"
    workers=()
    [[ -n "${SLURM_CPUS_PER_TASK:-}" ]] && workers=(--workers "$SLURM_CPUS_PER_TASK")
    exec "$PYTHON" -m speechlm.shard --num-tasks "$count" --task-index "$index" ${workers[@]+"${workers[@]}"} "$@"
    ;;
esac
