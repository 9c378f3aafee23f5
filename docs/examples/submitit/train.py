"""Training submitted with submitit, surviving Themis's leases through submitit's own checkpoint-and-requeue.

submitit (facebookincubator/submitit) pickles a callable, writes the sbatch script and runs the callable in
the job. A callable that is a ``submitit.helpers.Checkpointable`` is, on submitit's preemption signal,
asked for a ``checkpoint()``, then the job requeues itself (``scontrol requeue``) and the new run calls
it again. Two settings make that fit Themis, which sends SIGUSR1 to the batch shell only:

* ``SUBMITIT_PREEMPT_SIGNAL=USR1`` (read when submitit is imported): SIGUSR1 is the preemption signal;
* ``use_srun=False`` and ``python="exec <python>"``: the batch shell *becomes* the submitit worker, so
  the signal reaches submitit's handler (with srun the shell would be a bash waiting for it, which
  SIGUSR1 ends). One task on one node, then; a job of several tasks needs srun and a launcher that
  forwards the signal, as in docs/examples/torchrun.

As in the Lightning example, submitit's handler is run at a step boundary (`jobkit.LeaseWarning` takes
its place; the loop calls it), so the checkpoint it takes is a consistent state. The state itself goes
to a file in ``--out``; the pickled callable only carries the settings.

    python train.py --out $PWD/out --folder $PWD/submitit --wait     # submit, wait, print the result
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import sys
import time
from pathlib import Path

os.environ.setdefault("SUBMITIT_PREEMPT_SIGNAL", "USR1")  # before submitit is imported: it reads it then
import submitit  # noqa: E402
import torch  # noqa: E402

from themis_slurm import jobkit  # noqa: E402

FEATURES = 16


class Trainer(submitit.helpers.Checkpointable):
    """The training run; called in the job, again after each requeue (then it resumes from its file)."""

    def __init__(self, steps: int, out: Path, step_seconds: float, report_every_s: float) -> None:
        self.steps, self.out, self.step_seconds, self.report_every_s = (
            steps,
            out,
            step_seconds,
            report_every_s,
        )

    def __call__(self) -> dict[str, object]:
        torch.set_num_threads(1)
        # submitit has installed its SIGUSR1 handler: a flag takes its place, the loop calls it between steps
        warning = jobkit.LeaseWarning.install()
        run = jobkit.restart_count() + 1
        self.out.mkdir(parents=True, exist_ok=True)
        ckpt = self.out / "checkpoint.pt"
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        start = 0
        if ckpt.exists():
            state = torch.load(ckpt, weights_only=True)
            net.load_state_dict(state["model"])
            opt.load_state_dict(state["optim"])
            start = state["step"]
        print(f"run {run}: starting at step {start} of {self.steps}", flush=True)
        if start >= self.steps:  # finished before the requeue that started this run
            return json.loads((self.out / "result.json").read_text())
        progress = jobkit.ProgressReporter(total=self.steps, min_interval_s=self.report_every_s)
        loss = torch.zeros(())
        for step in range(start, self.steps):
            if warning.warned:
                save(ckpt, step, net, opt)
                progress.report(step, force=True)
                print(f"run {run}: lease warning: checkpoint at step {step}; submitit requeues", flush=True)
                warning.previous(warning.signum, None)  # submitit: checkpoint() and scontrol requeue; exits
            x, y = batch(step)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(net(x), y)
            loss.backward()
            opt.step()
            if self.step_seconds:
                time.sleep(self.step_seconds)  # stands for the compute of a real model
            progress.report(step + 1)
        save(ckpt, self.steps, net, opt)
        result = {"steps": self.steps, "loss": loss.item(), "weights": fingerprint(net), "run": run,
                  "resumed_from": start, "job": jobkit.job_id()}  # fmt: skip
        (self.out / "result.json").write_text(json.dumps(result))
        with open(self.out / "result.jsonl", "a") as f:  # one line per completion: "exactly once" is a count
            f.write(json.dumps(result) + "\n")
        progress.report(self.steps, force=True)
        print(f"run {run}: finished {self.steps} steps, loss {result['loss']:.6f}", flush=True)
        return result


def batch(step: int, size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch at `step`: a function of the step only, so a resumed run sees the same data."""
    g = torch.Generator().manual_seed(1_000_003 * step)
    x = torch.randn(size, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=torch.Generator().manual_seed(7))
    return x, torch.tanh(x @ w) + 0.01 * torch.randn(size, 1, generator=g)


def save(path: Path, step: int, net: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    """Write the checkpoint atomically: a requeue may end the run at any moment."""
    tmp = path.with_suffix(".tmp")
    torch.save({"step": step, "model": net.state_dict(), "optim": opt.state_dict()}, tmp)
    os.replace(tmp, path)


def fingerprint(net: torch.nn.Module) -> str:
    """sha256 of the weights' bytes: equal only when every weight is bit for bit equal."""
    h = hashlib.sha256()
    for name, t in sorted(net.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for the checkpoint and the result")
    p.add_argument("--folder", type=Path, required=True, help="submitit's folder (pickles, logs)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument(
        "--step-seconds", type=float, default=0.0, help="extra seconds per step (stands for compute)"
    )
    p.add_argument("--report-every-s", type=float, default=30.0, help="seconds between progress reports")
    p.add_argument("--local", action="store_true", help="run here, without Slurm (the uninterrupted run)")
    p.add_argument("--wait", action="store_true", help="wait for the job and print its result")
    args = p.parse_args()
    trainer = Trainer(args.steps, args.out.resolve(), args.step_seconds, args.report_every_s)
    if args.local:
        print(json.dumps(trainer()))
        return 0
    executor = submitit.SlurmExecutor(folder=args.folder, python=f"exec {shlex.quote(sys.executable)}")
    executor.update_parameters(
        partition="gpu",
        gres="gpu:1",
        time=60,  # minutes; submitit counts a signal in the last 20 % (or 10 min) as a timeout, not preemption
        use_srun=False,  # the batch shell is the worker (above)
        additional_parameters={
            "requeue": True,
            "signal": "B:USR1@120",
            "themis-app": "submitit-example",
            "themis-est": "10m",
        },  # fmt: skip
    )
    job = executor.submit(trainer)
    print(f"submitted job {job.job_id}", flush=True)
    if args.wait:
        print(json.dumps(job.result()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
