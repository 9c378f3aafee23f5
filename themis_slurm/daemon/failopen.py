"""Fail-open: when themisd is gone, its held jobs go back to plain Slurm instead of waiting forever.

themisd holds every managed job until it grants it GPUs; that is what keeps anything from starting outside
Themis while it is healthy. It also means a crash loop, a dead controller host or a wedged database would
take the whole managed partition down. Two parts open the gate once themisd's heartbeat
(heartbeat.py) is older than ``failopen.after_s`` (default 600 s; 0 turns fail-open off):

* job_submit.lua reads the same file and stops holding new jobs (it still writes their record, so
  themisd manages them again when it is back);
* this watchdog, `themisd failopen` (run every minute by themisd-failopen.timer, as root or themisd's
  Operator account), releases every held managed job, pin cleared, except those their owner holds
  (``hold=user``): Slurm then schedules them as it would without Themis. Each run says loudly what it did.

Nothing needs undoing by hand when themisd comes back: its first cycle writes the heartbeat (so
job_submit.lua holds again), holds again every released job that has not started ("rehold"), and adopts
with a lease every job Slurm started meanwhile ("adopted"), as after a crash. A job is never started twice:
the watchdog only releases, and Slurm starts a job once.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from themis_slurm.daemon.config import Config
from themis_slurm.daemon.heartbeat import read_heartbeat
from themis_slurm.slurm.model import SlurmBackend

log = logging.getLogger("themisd")

#: The eligibility reason of a job whose owner holds it (slurm/eligibility.py): never released here.
OWNER_HOLD = "held by its owner"


@dataclass
class FailOpenReport:
    """What one watchdog run saw and did."""

    age_s: float  # the heartbeat's age (inf: no heartbeat)
    limit_s: float
    acting: bool = False  # the heartbeat was too old: fail-open is on
    released: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # held by their owners
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        age = "no heartbeat" if not math.isfinite(self.age_s) else f"heartbeat {self.age_s:.0f} s old"
        if self.limit_s <= 0:
            return f"fail-open is off (failopen.after_s = 0); {age}"
        if not self.acting:
            return f"themisd is alive ({age}, limit {self.limit_s:g} s): nothing to do"
        return (f"FAIL-OPEN: themisd is gone ({age}, limit {self.limit_s:g} s): released {len(self.released)} "
                f"held managed job(s) to Slurm's own scheduling, kept {len(self.kept)} held by their owners, "
                f"{len(self.errors)} error(s); themisd holds or adopts them again when it is back")


def fail_open(backend: SlurmBackend, cfg: Config, now: float) -> FailOpenReport:
    """One watchdog run (module docstring): nothing while the heartbeat is fresh."""
    limit = cfg.failopen.after_s
    hb = read_heartbeat(cfg.failopen.heartbeat_file)
    rep = FailOpenReport(math.inf if hb is None else hb.age(now), limit)
    if limit <= 0 or rep.age_s <= limit:
        return rep
    rep.acting = True
    for mj in backend.snapshot().managed:
        if mj.state != "PENDING" or not mj.held:
            continue
        if mj.blocked is not None and mj.blocked.startswith(OWNER_HOLD):
            rep.kept.append(mj.job_id)
            continue
        try:
            backend.release_unpinned(mj)
        except Exception as e:  # one job's error must not keep the others waiting
            rep.errors.append(f"job {mj.job_id}: {e}")
            log.error("fail-open app=%s job=%s: release failed: %s", mj.app_key, mj.job_id, e)
            continue
        rep.released.append(mj.job_id)
        log.warning("fail-open app=%s job=%s: released to Slurm (themisd's heartbeat is %s)", mj.app_key,
                    mj.job_id, "missing" if not math.isfinite(rep.age_s) else f"{rep.age_s:.0f} s old")
    return rep
