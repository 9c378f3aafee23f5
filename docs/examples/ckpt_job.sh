#!/bin/bash
# ckpt_job.sh - a Themis-friendly batch job that needs no GPU framework: it does WORK seconds of "work" in
# one-second steps, checkpoints its step counter when Themis warns it (SIGUSR1) and every 5 steps, resumes
# from the checkpoint after a requeue, and reports its progress in its Comment. Used by the end-to-end tests
# (tests/slurm/test_daemon_e2e.py), which read CKPT_DIR/done-<jobid>; a template for real jobs (replace the sleep by training steps).
#
#   sbatch -p gpu --gres=gpu:2 --open-mode=append --themis-app=demo --themis-est=2m \
#          --export=ALL,WORK=120,CKPT_DIR=$PWD docs/examples/ckpt_job.sh
#
# After SIGUSR1 the job stops working and waits to be requeued: work done after the checkpoint would be
# lost by the requeue, and exiting would end the job (COMPLETED) instead of letting Themis resume it later.
set -u
work=${WORK:-60}
dir=${CKPT_DIR:-${SLURM_SUBMIT_DIR:-.}}
id=${SLURM_JOB_ID:-local}
# the id that addresses this job alone: in an array, the task (the bare id of an array's last task would
# update every task of the array)
self=${SLURM_JOB_ID:-}
[ -n "${SLURM_ARRAY_TASK_ID:-}" ] && self="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
ckpt="$dir/ckpt-$id"
step=0
[ -f "$ckpt" ] && step=$(cat "$ckpt")
stopping=0

save() { echo "$step" > "$ckpt.tmp" && mv "$ckpt.tmp" "$ckpt"; }
report() {
  # progress for Themis: the job's own Comment (owners may update it); best effort, never fatal
  [ -n "$self" ] && scontrol update JobId="$self" \
      Comment="themis:progress=$(awk -v s="$step" -v w="$work" 'BEGIN { printf "%.3f", s / w }')" 2>/dev/null
  return 0
}
trap 'save; stopping=1; echo "SIGUSR1: checkpoint at step $step, waiting for the requeue"' USR1

echo "start run=${SLURM_RESTART_COUNT:-0} step=$step node=${SLURMD_NODENAME:-?} gpus=${CUDA_VISIBLE_DEVICES:-?}"
while [ "$step" -lt "$work" ]; do
  sleep 1 & wait $!            # `wait` returns at once when the trap fires
  [ "$stopping" = 1 ] && continue
  step=$((step + 1))
  if [ $((step % 5)) -eq 0 ]; then save; report; fi
done
if [ "$stopping" = 1 ]; then
  while :; do sleep 1 & wait $!; done   # warned: do no more work, the requeue ends this run
fi
save
echo "done step=$step"
echo "$step" >> "$dir/done-$id"        # one line per completion: the tests check "exactly once"
