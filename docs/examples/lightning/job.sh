#!/bin/bash
# docs/examples/lightning/job.sh - PyTorch Lightning under Themis's leases, with Lightning's own auto-requeue.
#
#   sbatch --export=ALL,PYTHON=$HOME/venv/bin/python docs/examples/lightning/job.sh [train.py options]
#
# The batch shell becomes `python -m themis_slurm.jobkit run` (exec), so Themis's warning (SIGUSR1 to the
# batch shell only) reaches it; it forwards the signal to srun and srun to the training task, where
# Lightning (SLURMEnvironment(auto_requeue=True, requeue_signal=SIGUSR1)) checkpoints at the next step
# boundary and requeues the job itself. jobkit keeps the job alive meanwhile (an exiting batch script would
# end it COMPLETED). After the requeue the script runs again from the top and Lightning resumes.
#
# Needs, in the Python given by PYTHON: lightning (2.x) and themis_slurm.jobkit (pip install --no-deps
# themis-slurm, or PYTHONPATH to a copy; standard library only).
#SBATCH -p gpu
#SBATCH --nodes=1 --ntasks-per-node=1
#SBATCH --gres=gpu:1
#SBATCH --time=1:00:00
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --themis-app=lightning-example --themis-est=10m
set -euo pipefail
PYTHON=${PYTHON:-python3}
TRAIN=${TRAIN:-$SLURM_SUBMIT_DIR/train.py}         # the script is copied to Slurm's spool: name train.py
OUT=${OUT:-$SLURM_SUBMIT_DIR/lightning-$SLURM_JOB_ID}  # Lightning's default_root_dir: hpc_ckpt_N.ckpt go here
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
echo "run $((${SLURM_RESTART_COUNT:-0} + 1)) of job $SLURM_JOB_ID on $SLURM_JOB_NODELIST"

# srun: Lightning reads its ranks from the step's SLURM_* variables (one task per GPU on real nodes)
exec "$PYTHON" -m themis_slurm.jobkit run -- srun "$PYTHON" "$TRAIN" --out "$OUT" "$@"
