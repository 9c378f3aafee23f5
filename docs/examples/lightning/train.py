"""A PyTorch Lightning training script that survives Themis's leases with Lightning's own SLURM support.

Started by docs/examples/lightning/job.sh (``srun python train.py``). Lightning does the work:
``SLURMEnvironment(auto_requeue=True, requeue_signal=signal.SIGUSR1)`` gives the Trainer a SIGUSR1 handler
that writes ``hpc_ckpt_N.ckpt`` into ``default_root_dir`` and runs ``scontrol requeue`` on its own job;
after the restart ``trainer.fit`` finds that checkpoint and resumes from it (model, optimizer, loops).

One change, in the `Themis` callback: Lightning's handler runs at a step boundary, not wherever the
signal lands. Called in the middle of a step (after the optimizer has updated the weights, before the loop
has counted the batch), it saves a checkpoint whose resume applies that update twice: measured here, 1 of
10 resumes then ended with other weights than an uninterrupted run. The callback also reports progress,
and the run that was warned never reports itself finished: the run after the requeue does, once. The
end-to-end test (tests/slurm/test_training_e2e.py) checks that the final loss and weights equal, bit for
bit, those of a run that was never interrupted.

    python train.py --out /tmp/lit --steps 200          # uninterrupted, locally (no SLURM_* variables)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import time
from pathlib import Path

import lightning as L  # noqa: N812
import torch
from lightning.pytorch.plugins.environments import SLURMEnvironment
from torch.utils.data import DataLoader, TensorDataset

from themis_slurm import jobkit

FEATURES = 16
BATCH = 32


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200, help="optimizer steps in all (default 200)")
    p.add_argument(
        "--out", type=Path, required=True, help="folder for Lightning's checkpoints and result.jsonl"
    )
    p.add_argument(
        "--step-seconds", type=float, default=0.0, help="extra seconds per step (stands for compute)"
    )
    p.add_argument("--report-every-s", type=float, default=30.0, help="seconds between progress reports")
    return p.parse_args()


def dataset(samples: int = BATCH) -> TensorDataset:
    """Fixed data (a function of the seed only), one batch of it: every checkpoint is then at the end of an
    epoch or inside its one step. Lightning restarts an epoch that a checkpoint cut in the middle from its
    first batch unless the dataloader is resumable (it warns), which changes the order of the updates."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(samples, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=torch.Generator().manual_seed(7))
    return TensorDataset(x, torch.tanh(x @ w) + 0.01 * torch.randn(samples, 1, generator=g))


class Regression(L.LightningModule):
    def __init__(self, step_seconds: float) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        self.step_seconds = step_seconds
        self.last_loss = float("nan")

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.step_seconds:
            time.sleep(self.step_seconds)  # stands for the forward pass of a real model
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.last_loss = loss.item()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class Themis(L.Callback):
    """Runs Lightning's checkpoint-and-requeue handler at a step boundary; reports progress to Themis."""

    def __init__(self, steps: int, report_every_s: float) -> None:
        self.progress = jobkit.ProgressReporter(total=steps, min_interval_s=report_every_s)
        self.warning: jobkit.LeaseWarning | None = None
        self.requeued = False
        self.start_step = 0

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        # By now the Trainer has installed its SIGUSR1 handler and restored the checkpoint, if any. Put a flag
        # in the handler's place; Lightning's runs in on_train_batch_end.
        self.warning = jobkit.LeaseWarning.install()
        self.start_step = trainer.global_step

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        assert self.warning is not None
        # any rank warned: all checkpoint after this same step (saving is collective with several ranks)
        warned = trainer.strategy.reduce_boolean_decision(self.warning.warned, all=False)
        if warned and not self.requeued and callable(self.warning.previous):
            self.requeued = True
            self.warning.previous(self.warning.signum, None)  # Lightning: hpc checkpoint + scontrol requeue
            trainer.should_stop = True  # the requeue ends this run; train no further meanwhile
        elif trainer.is_global_zero:
            self.progress.report(trainer.global_step)

    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self.warning is not None:
            self.warning.uninstall()

    @property
    def warned(self) -> bool:
        return self.requeued or (self.warning is not None and self.warning.warned)


def fingerprint(model: torch.nn.Module) -> str:
    """sha256 of the weights' bytes: equal only when every weight is bit for bit equal."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main() -> int:
    args = arguments()
    torch.set_num_threads(1)
    run = jobkit.restart_count() + 1
    themis = Themis(args.steps, args.report_every_s)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=args.steps,
        max_epochs=-1,
        default_root_dir=args.out,
        plugins=[SLURMEnvironment(auto_requeue=True, requeue_signal=signal.SIGUSR1)],
        callbacks=[themis],
        enable_checkpointing=False,  # Lightning's hpc checkpoint at the warning is the one that matters here
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        deterministic=True,
    )
    model = Regression(args.step_seconds)
    loader = DataLoader(dataset(), batch_size=BATCH)  # one batch: an epoch is a step (see dataset)
    trainer.fit(model, loader)  # on SLURM it resumes from the newest hpc_ckpt_N.ckpt in --out, if any
    if not trainer.is_global_zero:
        return 0
    print(
        f"run {run}: started at step {themis.start_step}, stopped at step {trainer.global_step}", flush=True
    )
    if themis.warned or trainer.global_step < args.steps:
        print(f"run {run}: lease warning: Lightning checkpointed and requeued the job", flush=True)
        return 0
    if themis.start_step >= args.steps:  # finished before the requeue that started this run
        print(f"run {run}: already finished", flush=True)
        return 0
    # Mark the work done for a run after a late requeue (it then resumes at the last step), then the result.
    trainer.save_checkpoint(trainer._checkpoint_connector.hpc_save_path(trainer.default_root_dir))
    result = {"steps": trainer.global_step, "loss": model.last_loss, "weights": fingerprint(model.net), "run": run,
              "resumed_from": themis.start_step, "job": jobkit.job_id()}  # fmt: skip
    with open(args.out / "result.jsonl", "a") as f:  # one line per completion: "exactly once" is a count
        f.write(json.dumps(result) + "\n")
    themis.progress.report(args.steps, force=True)
    print(f"run {run}: finished {args.steps} steps, loss {model.last_loss:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
