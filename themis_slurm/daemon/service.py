"""Running themisd as a service: lock, logging, signals, sd_notify, metrics endpoint, the poll loop.

* One daemon per state directory: an exclusive flock on ``state_dir/themisd.lock`` (also what makes
  ``themisd handback`` refuse to run under a live daemon, which would hold the jobs again).
* SIGHUP re-reads the config file; a bad file is logged and the running config kept. SIGTERM/SIGINT finish
  the current cycle and exit 0.
* READY=1 after the first successful cycle; WATCHDOG=1 after every cycle and, when WatchdogSec is shorter
  than the poll interval, while sleeping; STATUS= says what the last cycle did.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from themis_slurm.api import start_api_server
from themis_slurm.daemon import config as config_mod
from themis_slurm.daemon.config import Config, ConfigError
from themis_slurm.daemon.handback import read_job_submit_mode
from themis_slurm.daemon.loop import Daemon
from themis_slurm.daemon.metrics import Metrics
from themis_slurm.daemon.planning import finish_times
from themis_slurm.daemon.sdnotify import Notifier
from themis_slurm.daemon.store import open_store
from themis_slurm.slurm.model import SlurmBackend

log = logging.getLogger("themisd")


class AlreadyRunning(RuntimeError):
    pass


@contextmanager
def state_lock(state_dir: str) -> Iterator[None]:
    """Exclusive lock on the state directory for the life of the block (released by the kernel on kill -9)."""
    Path(state_dir).mkdir(parents=True, exist_ok=True)
    path = Path(state_dir) / "themisd.lock"
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            raise AlreadyRunning(f"themisd (pid {holder}) holds {path}: stop it first "
                                 "(systemctl stop themisd)") from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        yield


def setup_logging(level: str) -> None:
    """One line per event on stderr; journald adds the timestamp, so only the level and message are written."""
    fmt = "%(levelname)s %(message)s" if os.environ.get("JOURNAL_STREAM") else "%(asctime)s %(levelname)s %(message)s"
    logging.basicConfig(stream=sys.stderr, format=fmt, level=level.upper(), force=True)


def check_job_submit_mode(cfg: Config) -> None:
    """Warns when job_submit.lua's mode contradicts the daemon's (held jobs nobody releases, or no holds)."""
    if not cfg.slurm.job_submit_conf:
        return
    lua = read_job_submit_mode(cfg.slurm.job_submit_conf)
    if lua is None:
        log.warning("cannot read the mode from %s; make sure job_submit.lua's mode matches", cfg.slurm.job_submit_conf)
    elif cfg.mode == "enforce" and lua != "enforce":
        log.warning("job_submit.lua mode is %r: new jobs are not held, themisd holds them after submit "
                    "(set mode = \"enforce\" in %s)", lua, cfg.slurm.job_submit_conf)
    elif cfg.mode == "observe" and lua == "enforce":
        log.error("job_submit.lua holds jobs (mode enforce) but themisd only observes: held jobs will never "
                  "start; set mode = \"observe\" in %s", cfg.slurm.job_submit_conf)


class Service:
    """The long-running loop; `stop` and `reload` may be called from signal handlers or other threads."""

    def __init__(self, cfg: Config, config_path: Path, backend: SlurmBackend, notifier: Notifier | None = None,
                 loader: Callable[[Path], Config] = config_mod.load, fresh_state: bool = False) -> None:
        self.cfg = cfg
        self.fresh_state = fresh_state  # --fresh-state: move a damaged/missing database aside, start empty
        self.path = config_path
        self.backend = backend
        self.notifier = notifier or Notifier()
        self.loader = loader
        self.metrics = Metrics()
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._wake = threading.Event()  # set by stop and reload so that the sleep between cycles ends

    def stop(self, *_: object) -> None:
        self._stop.set()
        self._wake.set()

    def request_reload(self, *_: object) -> None:
        self._reload.set()
        self._wake.set()

    def _do_reload(self, daemon: Daemon) -> None:
        self._reload.clear()
        self.notifier.reloading()
        try:
            new = self.loader(self.path)
        except ConfigError as e:
            log.error("config reload rejected, keeping the running config: %s", e)
            self.metrics.config_reloads.labels("rejected").inc()
        else:
            daemon.reload(new)
            setup_logging(daemon.cfg.log_level)
            check_job_submit_mode(daemon.cfg)
            log.info("config reloaded from %s", self.path)
            self.metrics.config_reloads.labels("applied").inc()
        self.notifier.ready()

    def run(self, max_cycles: int | None = None) -> int:
        with state_lock(self.cfg.state_dir):
            # StateError (one line: file, problem, recovery) propagates to `themisd run`, which prints it
            store = open_store(self.cfg.db_path, fresh_state=self.fresh_state)
            daemon = Daemon(self.cfg, self.backend, store, self.metrics)
            if self.cfg.metrics.address:
                self.metrics.serve(self.cfg.metrics.address)
                log.info("metrics on http://%s/metrics", self.cfg.metrics.listen)
            api = self._start_api(daemon)
            check_job_submit_mode(self.cfg)
            log.info("themisd started: mode=%s poll=%gs lease=%gmin state=%s schema=v%d", self.cfg.mode,
                     self.cfg.poll_interval_s, self.cfg.scheduler.lease_minutes, self.cfg.db_path, store.version)
            wd = self.notifier.watchdog_interval_s()
            ready = False
            cycles = 0
            try:
                while not self._stop.is_set():
                    if self._reload.is_set():
                        self._do_reload(daemon)
                    t0 = time.monotonic()
                    rep = daemon.cycle()
                    cycles += 1
                    status = (f"mode={daemon.cfg.mode} cycle={rep.duration_s:.3f}s calls={rep.slurm_calls} "
                              f"last round: {rep.trigger or 'not due'}")
                    log.debug("cycle %.3fs slurm_calls=%d fixes=%d round=%s", rep.duration_s, rep.slurm_calls,
                              rep.fixes, rep.trigger)
                    if not ready and not rep.errors:
                        self.notifier.ready(status)
                        ready = True
                    self.notifier.watchdog(status)
                    if max_cycles is not None and cycles >= max_cycles:
                        break
                    self._sleep(daemon.cfg.poll_interval_s - (time.monotonic() - t0), wd)
            finally:
                self.notifier.stopping()
                if api is not None:
                    api.stop()
                store.close()
                log.info("themisd stopped")
        return 0

    def _start_api(self, daemon: Daemon):  # type: ignore[no-untyped-def]
        """The read-only status API on api.listen, fed by the daemon's last snapshot; never fatal."""
        if not self.cfg.api.listen:
            return None
        try:
            server = start_api_server(self.cfg.db_path, self.cfg.api.listen, self.cfg.slurm.slurm_conf or None,
                                      partitions=self.cfg.slurm.partitions, operators=self.cfg.api.operators,
                                      snapshot=lambda: daemon.last_snapshot,
                                      last_cycle=lambda: daemon.last_cycle_time,
                                      estimator=lambda snap, jobs, apps, now=None: finish_times(
                                          snap, jobs, apps, daemon.cfg, now))
        except Exception as e:  # the scheduler must run even when the API cannot
            log.error("status API not started on %s: %s", self.cfg.api.listen, e)
            return None
        log.info("status API on %s", server.url)
        return server

    def _sleep(self, seconds: float, watchdog_s: float | None) -> None:
        end = time.monotonic() + max(0.0, seconds)
        while not self._stop.is_set() and not self._reload.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return
            step = min(left, watchdog_s) if watchdog_s else left
            if self._wake.wait(step):
                self._wake.clear()
                return
            if watchdog_s and time.monotonic() < end:
                self.notifier.watchdog()


def install_signals(service: Service) -> None:
    signal.signal(signal.SIGTERM, service.stop)
    signal.signal(signal.SIGINT, service.stop)
    signal.signal(signal.SIGHUP, service.request_reload)
