#!/bin/bash
# docs/examples/torchrun/job.sh - data-parallel PyTorch across nodes with torchrun, under Themis's leases.
#
#   sbatch --export=ALL,PYTHON=$HOME/venv/bin/python docs/examples/torchrun/job.sh [train.py options]
#
# The batch shell becomes `python -m themis_slurm.jobkit run` (exec), so Themis's warning (SIGUSR1 to the
# batch shell only) reaches it; it forwards the signal to srun, srun to the torchrun agent on every node,
# and torchrun (--signals-to-handle) to its workers, which checkpoint and exit; jobkit then keeps the job
# alive until Themis requeues it (an exiting batch script would end the job COMPLETED). After the requeue
# the script runs again from the top and train.py resumes from its checkpoint.
#
# Needs, in the Python given by PYTHON: torch whose torchrun has --signals-to-handle (tested: 2.13) and
# themis_slurm.jobkit (pip install --no-deps themis-slurm, or PYTHONPATH to a copy; standard library only).
#SBATCH -p gpu
#SBATCH --nodes=2 --ntasks-per-node=1
#SBATCH --gres=gpu:1
#SBATCH --time=1:00:00
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --themis-app=ddp-example --themis-est=10m
set -euo pipefail
PYTHON=${PYTHON:-python3}
TRAIN=${TRAIN:-$SLURM_SUBMIT_DIR/train.py}        # the script is copied to Slurm's spool: name train.py
OUT=${OUT:-$SLURM_SUBMIT_DIR/ddp-$SLURM_JOB_ID}    # checkpoint and result: a folder every node can reach
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# The rendezvous runs on the first node, the one this script runs on: its address as Slurm knows it, and a
# port free there now.
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
addr=$(scontrol show node "$head" | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p')
port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
echo "run $((${SLURM_RESTART_COUNT:-0} + 1)) of job $SLURM_JOB_ID on $SLURM_JOB_NODELIST, rendezvous $addr:$port"

exec "$PYTHON" -m themis_slurm.jobkit run -- \
  srun "$PYTHON" -m torch.distributed.run \
    --nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node="${SLURM_GPUS_ON_NODE:-1}" \
    --rdzv-backend=c10d --rdzv-endpoint="$addr:$port" --rdzv-id="$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}" \
    --signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1 \
    "$TRAIN" --out "$OUT" "$@"
