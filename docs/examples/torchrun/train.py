"""A data-parallel PyTorch training script that survives Themis's leases (torchrun, gloo; CPU or GPU).

Started by docs/examples/torchrun/job.sh (one torchrun agent per node, one worker per agent here). Each
worker installs the lease warning before anything slow, trains a small regression model on data that is
a pure function of (step, rank), and checks the warning between steps. All ranks decide together (an
all-reduce of the flag), so they stop after the same step: rank 0 then writes the checkpoint (weights,
optimizer state, step) and every rank exits 0. After the requeue the job starts again from the top and
resumes from that checkpoint. Because the data and the order of the updates do not depend on where the run
was cut, the final weights are bit for bit those of a run that was never interrupted: the end-to-end test
(tests/slurm/test_training_e2e.py) checks exactly that against an uninterrupted run.

    torchrun --standalone --nproc-per-node=2 train.py --steps 200 --out /tmp/ddp   # uninterrupted, locally

Replace the model, the data and `--step-seconds` (which stands for the compute of a real model) by yours
(on GPUs: ``init_process_group("nccl")``, the model and batches on ``cuda:$LOCAL_RANK``); keep the three
Themis parts: the warning checked between steps, the checkpoint and resume, the progress.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

from themis_slurm import jobkit

# First, before the slow imports: a SIGUSR1 that came before a handler exists would kill the worker.
warning = jobkit.LeaseWarning.install()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

FEATURES = 16


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200, help="optimizer steps in all (default 200)")
    p.add_argument("--out", type=Path, required=True, help="folder for checkpoint.pt and result.jsonl")
    p.add_argument(
        "--step-seconds", type=float, default=0.0, help="extra seconds per step (stands for compute)"
    )
    p.add_argument("--checkpoint-every", type=int, default=50, help="steps between routine checkpoints")
    p.add_argument("--report-every-s", type=float, default=30.0, help="seconds between progress reports")
    return p.parse_args()


def batch(step: int, rank: int, size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of `rank` at `step`: a function of both only, so a resumed run sees the same data."""
    g = torch.Generator().manual_seed(1_000_003 * step + rank)
    x = torch.randn(size, FEATURES, generator=g)
    teacher = torch.Generator().manual_seed(7)
    w = torch.randn(FEATURES, 1, generator=teacher)
    y = torch.tanh(x @ w) + 0.01 * torch.randn(size, 1, generator=g)
    return x, y


def fingerprint(model: torch.nn.Module) -> str:
    """sha256 of the weights' bytes: equal only when every weight is bit for bit equal."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def save(path: Path, step: int, model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    """Write the checkpoint atomically: a requeue (SIGKILL after KillWait) may land at any moment."""
    tmp = path.with_suffix(".tmp")
    torch.save({"step": step, "model": model.state_dict(), "optim": opt.state_dict()}, tmp)
    os.replace(tmp, path)


def main() -> int:
    args = arguments()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    train(args)
    dist.barrier()  # every rank done (a checkpoint or the result written) before any leaves
    dist.destroy_process_group()
    return 0


def train(args: argparse.Namespace) -> None:
    """Train from the checkpoint, if any, until the last step or the lease warning."""
    rank, world = dist.get_rank(), dist.get_world_size()
    args.out.mkdir(parents=True, exist_ok=True)
    ckpt = args.out / "checkpoint.pt"

    torch.manual_seed(0)  # same initial weights on every rank (DDP also broadcasts rank 0's)
    net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    start = 0
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=True)
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        start = state["step"]
    model = DistributedDataParallel(net)
    run = jobkit.restart_count() + 1
    if rank == 0:
        print(f"run {run}: {world} ranks, starting at step {start} of {args.steps}", flush=True)
    progress = jobkit.ProgressReporter(total=args.steps, min_interval_s=args.report_every_s)
    if start >= args.steps:  # finished before the requeue that started this run: nothing more to do
        if rank == 0:
            print(f"run {run}: already finished ({start} steps)", flush=True)
        return

    loss = torch.zeros(())
    for step in range(start, args.steps):
        stop = torch.tensor([1 if warning.warned else 0])
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # one rank warned: all stop after the same step
        if stop.item():
            if rank == 0:
                save(ckpt, step, net, opt)
                progress.report(step, force=True)
                print(
                    f"run {run}: lease warning: checkpoint at step {step}, exiting for the requeue",
                    flush=True,
                )
            return
        x, y = batch(step, rank)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if args.step_seconds:
            time.sleep(args.step_seconds)
        if rank == 0:
            if (step + 1) % args.checkpoint_every == 0:
                save(ckpt, step + 1, net, opt)  # a missed warning then costs at most these steps
            progress.report(step + 1)

    final = loss.detach().clone()
    dist.all_reduce(final)  # the mean of the last step's losses over the ranks
    if rank == 0:
        save(ckpt, args.steps, net, opt)
        result = {
            "steps": args.steps,
            "loss": final.item() / world,
            "weights": fingerprint(net),
            "run": run,
            "resumed_from": start,
            "job": jobkit.job_id(),
        }
        with open(args.out / "result.jsonl", "a") as f:  # one line per completion: "exactly once" is a count
            f.write(json.dumps(result) + "\n")
        progress.report(args.steps, force=True)
        print(f"run {run}: finished {args.steps} steps, loss {result['loss']:.6f}", flush=True)


if __name__ == "__main__":
    code = main()
    # Leave without the interpreter's shutdown. Gloo's worker threads outlive destroy_process_group (torch
    # 2.13: they are still running after it) and may free the last tensor of a finished collective while
    # Python finalizes; the thread then cannot take the GIL and the process aborts ("terminate called
    # without an active exception"). Measured: 2 of 33 runs of this script on a loaded 2-core machine,
    # after every step and the result were written, so the job would end FAILED and be requeued for
    # nothing. Everything this script writes is closed or os.replace()d by now; only stdio needs a flush.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
