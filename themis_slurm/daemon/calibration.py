"""Each user's estimate calibration as themisd keeps it (the rules are core/calibration.py's).

What the finished jobs in the store say is read only when needed and cached until one more job finishes
or the config is reloaded; every accounting adds what the present jobs say (started jobs past their
estimates raise their users' factors at once; users without evidence are held to their peers' claims).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from themis_slurm.core.calibration import (
    NONE,
    Calibration,
    UserHistory,
    calibrate,
    finished_ratio,
    with_present,
)
from themis_slurm.daemon.config import Config
from themis_slurm.daemon.estimates import present_by_user
from themis_slurm.daemon.metrics import Metrics
from themis_slurm.slurm.model import ManagedJob
from themis_slurm.state.rows import JobRow
from themis_slurm.state.store import Store

log = logging.getLogger("themisd")
#: Finished jobs kept per user for calibration: at least this many, more when the window is larger (a
#: config reload that widens the window then has the history at once).
HISTORY_KEPT = 200


class Calibrations:
    """The histories read from the store when needed, the Calibration they make alone (until a job
    finishes) and with the last accounting's present jobs."""

    def __init__(self, store: Store, config: Callable[[], Config], metrics: Metrics) -> None:
        self.store = store
        self.config = config
        self.metrics = metrics
        self._histories: dict[str, UserHistory] | None = None
        self._finished: Calibration | None = None
        self._current: Calibration | None = None
        self._sources: dict[str, str] = {}  # user -> where their factor came from, last logged

    def reset(self) -> None:
        """Forget what was read and made (a reload may change the window and the rules)."""
        self._histories = self._finished = self._current = None

    def current(self) -> Calibration:
        """As the last accounting made it; before any, from the finished jobs alone."""
        return self._current if self._current is not None else self.finished()

    def finished(self) -> Calibration:
        """What the finished jobs in the store say (cached until one more job finishes or a reload)."""
        if self._finished is not None:
            return self._finished
        cal = self.config().estimates.calibration()
        if not cal.enabled:
            self._finished = NONE
            return NONE
        if self._histories is None:
            self._histories = {
                user: UserHistory.of(((r, w) for e, w in pairs if (r := finished_ratio(e, w)) is not None),
                                     cal.window)
                for user, pairs in self.store.finished_history(cal.window).items()
            }  # fmt: skip
        self._finished = calibrate(self._histories, cal)
        return self._finished

    def now(self, rows: Mapping[str, JobRow], jobs: Mapping[str, ManagedJob]) -> Calibration:
        """This cycle's calibration: the finished jobs' with what the present jobs add. A user whose factor
        comes from a new place is logged once."""
        learned = self.finished()
        cfg = self.config().estimates
        cal = cfg.calibration()
        present = present_by_user(rows, jobs, cfg) if cal.enabled else {}
        now = with_present(learned, self._histories or {}, present, cal)
        self._current = now
        for user in present:
            source = now.source(user)
            if self._sources.get(user) != source:
                self._sources[user] = source
                log.info("calibration user=%s: factor %.3g from %s", user, now.factor(user), source)
        for user in [u for u in self._sources if u not in present]:
            del self._sources[user]
        return now

    def completed(self, row: JobRow, user: str, now: float) -> None:
        """A job that ended COMPLETED with a usable estimate: into `user`'s history (in the caller's
        transaction); the histories are read again at the next accounting."""
        if finished_ratio(row.est_work, row.done_service) is None:
            return
        cal = self.config().estimates.calibration()
        self.store.add_finished(row.job_id, user, row.app_key, now, row.est_work, row.done_service,
                                keep=max(cal.window, HISTORY_KEPT))  # fmt: skip
        self._histories = self._finished = None
        self.metrics.calibration_samples.inc()
        log.info(
            "calibration app=%s job=%s: completed after %.0f of an estimated %.0f GPU-s (ratio %.2f)",
            row.app_key,
            row.job_id,
            row.done_service,
            row.est_work,
            row.done_service / row.est_work,
        )
