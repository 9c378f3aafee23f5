"""Running themisd as a service: lock, logging, signals, sd_notify, metrics endpoint, the poll loop.

* One daemon per state directory: an exclusive flock on ``state_dir/themisd.lock`` (also what makes
  ``themisd handback`` refuse to run under a live daemon, which would hold the jobs again).
* SIGHUP re-reads the config file; a bad file is logged and the running config kept. SIGTERM/SIGINT finish
  the current cycle and exit 0.
* READY=1 after the first successful cycle; WATCHDOG=1 after every cycle and, when WatchdogSec is shorter
  than the poll interval, while sleeping; STATUS= says what the last cycle did.
* A cycle that cannot write the state database (disk full, I/O error, read-only) is abandoned, not fatal:
  one error line per episode names the file, the disk and the fix, the next cycles retry, and one line says
  when it works again. Every Slurm action follows its committed intent (daemon/loop.py), so nothing is done
  in Slurm that the database does not record.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from io import FileIO
from pathlib import Path

from themis_slurm.api import start_api_server
from themis_slurm.daemon import config as config_mod
from themis_slurm.daemon.config import Config, ConfigError
from themis_slurm.daemon.handback import read_job_submit_mode
from themis_slurm.daemon.heartbeat import write_heartbeat
from themis_slurm.daemon.loop import Daemon
from themis_slurm.daemon.metrics import Metrics
from themis_slurm.daemon.sdnotify import Notifier
from themis_slurm.daemon.site_models import disagreements
from themis_slurm.slurm.model import SlurmBackend
from themis_slurm.state.disk import (
    LOCK_NAME,
    check_private,
    make_state_dir,
    private_opener,
    storage_message,
    storage_problem,
)
from themis_slurm.state.errors import StateError
from themis_slurm.state.opening import open_store

log = logging.getLogger("themisd")


class AlreadyRunning(RuntimeError):
    pass


@contextmanager
def state_lock(state_dir: str, wait: Callable[[str], bool] | None = None) -> Iterator[None]:
    """Exclusive lock on the state directory for the life of the block (released by the kernel on kill -9).

    The directory is created 0750 and the lock file 0640, whatever the umask (state/disk.py).
    Held by another themisd: AlreadyRunning, or with `wait` (standby) ``wait(holder)`` is called about once
    a second until the lock is free (then the block runs) or it returns False (then AlreadyRunning).
    """
    make_state_dir(Path(state_dir))
    path = Path(state_dir) / LOCK_NAME
    with _open_lock(path) as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                f.seek(0)
                holder = f.read().decode(errors="replace").strip() or "?"
                if wait is None or not wait(holder):
                    raise AlreadyRunning(f"themisd (pid {holder}) holds {path}: stop it first "
                                         "(systemctl stop themisd)") from None
        _write_pid(f.fileno(), path)
        yield


def _open_lock(path: Path) -> FileIO:
    """The lock file, unbuffered (the pid is written with os.write: nothing is left to flush at close)."""
    try:
        return open(path, "a+b", buffering=0, opener=private_opener)
    except OSError as e:
        raise StateError(f"{path}: cannot open the lock file: {e.strerror or e}: check that state_dir is "
                         "writable by the service user", damaged=False) from None


def _write_pid(fd: int, path: Path) -> None:
    """The holder's pid into the lock file, for a second themisd's message. Only informative (the flock
    is the lock), so a failure is left to the database to report (one line, naming the disk)."""
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} on {socket.gethostname()}\n".encode())
    except OSError as e:
        log.debug("%s: cannot write the pid into it (%s)", path, e.strerror or e)


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


def check_site_models(cfg: Config) -> None:
    """Warns when themis.yaml's own model classes and the lists of job_submit.lua and the SPANK plugin differ
    (daemon/site_models.py: jobs refused at submit, or placed as the default class)."""
    for problem in disagreements(cfg):
        log.warning("model classes: %s", problem)


@dataclass
class Outage:
    """An episode of cycles that could not write the state database: logged once, counted, ended once."""

    problem: str  # state.disk.storage_problem: full, io, readonly
    since: float  # time.monotonic() of the first failed cycle
    cycles: int = 1


class Service:
    """The long-running loop; `stop` and `reload` may be called from signal handlers or other threads."""

    def __init__(self, cfg: Config, config_path: Path, backend: SlurmBackend, notifier: Notifier | None = None,
                 loader: Callable[[Path], Config] = config_mod.load, fresh_state: bool = False,
                 standby: bool = False) -> None:
        self.cfg = cfg
        #: --standby: wait for the state lock instead of refusing to start (a backup controller's themisd)
        self.standby = standby
        self._waiting = False
        self.fresh_state = fresh_state  # --fresh-state: move a damaged/missing database aside, start empty
        self.path = config_path
        self.backend = backend
        self.notifier = notifier or Notifier()
        self.loader = loader
        self.metrics = Metrics()
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._wake = threading.Event()  # set by stop and reload so that the sleep between cycles ends
        self.outage: Outage | None = None  # the state database cannot be written (see _cycle)
        self._beat_failed = False  # the last heartbeat could not be written (logged once)

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
            check_site_models(daemon.cfg)
            log.info("config reloaded from %s", self.path)
            self.metrics.config_reloads.labels("applied").inc()
        self.notifier.ready()

    def _standby(self, holder: str) -> bool:
        """While on standby (another themisd holds the lock): say so once, keep systemd's watchdog fed,
        and look again in a second; False once asked to stop."""
        if not self._waiting:
            self._waiting = True
            log.info("standby: themisd (pid %s) holds %s; this themisd takes over as soon as it is gone",
                     holder, Path(self.cfg.state_dir) / LOCK_NAME)
            self.notifier.ready(f"standby: themisd pid {holder} is active")
        self.notifier.watchdog(f"standby: themisd pid {holder} is active")
        return not self._stop.wait(1.0)

    def run(self, max_cycles: int | None = None) -> int:
        try:
            with state_lock(self.cfg.state_dir, self._standby if self.standby else None):
                if self._waiting:
                    log.warning("standby: the state lock is free: taking over (reconciling with Slurm as after "
                                "a crash)")
                return self._run_locked(max_cycles)
        except AlreadyRunning:
            if self.standby and self._stop.is_set():
                log.info("standby: stopped before taking over")
                return 0
            raise

    def _run_locked(self, max_cycles: int | None) -> int:
        """The daemon's life once it holds the state lock."""
        # StateError (one line: file, problem, recovery) propagates to `themisd run`, which prints it
        check_private(self.cfg.db_path)
        store = open_store(self.cfg.db_path, fresh_state=self.fresh_state)
        daemon = Daemon(self.cfg, self.backend, store, self.metrics)
        if self.cfg.metrics.address:
            self.metrics.serve(self.cfg.metrics.address)
            log.info("metrics on http://%s/metrics", self.cfg.metrics.listen)
        api = self._start_api(daemon)
        check_job_submit_mode(self.cfg)
        check_site_models(self.cfg)
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
                status, good = self._cycle(daemon)
                cycles += 1
                if not ready and good:
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

    def _cycle(self, daemon: Daemon) -> tuple[str, bool]:
        """One cycle: (systemd STATUS text, whether it went without errors). A cycle the state database
        could not take is abandoned and retried next time (:meth:`_storage_failed`); other errors propagate."""
        try:
            rep = daemon.cycle()
        except sqlite3.Error as e:
            problem = storage_problem(e)
            if problem is None:
                raise
            return self._storage_failed(daemon, problem, e), False
        if self.outage is not None:
            log.info("state database %s: writable again after %d failed cycle(s) in %.0f s; themisd resumes",
                     self.cfg.db_path, self.outage.cycles, time.monotonic() - self.outage.since)
            self.outage = None
        self._beat(time.time())
        log.debug("cycle %.3fs slurm_calls=%d fixes=%d round=%s", rep.duration_s, rep.slurm_calls, rep.fixes,
                  rep.trigger)
        status = (f"mode={daemon.cfg.mode} cycle={rep.duration_s:.3f}s calls={rep.slurm_calls} "
                  f"last round: {rep.trigger or 'not due'}")
        return status, not rep.errors

    def _beat(self, now: float) -> None:
        """The heartbeat after every cycle that could record its work (fail-open reads it: failopen.py).

        Not after a cycle the database refused: a themisd that cannot record anything is as good as gone.
        A failed write is logged once per episode (fail-open will act once the file is old enough).
        """
        path = self.cfg.failopen.heartbeat_file
        if not path:
            return
        try:
            write_heartbeat(path, now)
        except OSError as e:
            if not self._beat_failed:
                log.error("cannot write the heartbeat %s (%s): job_submit.lua and themisd-failopen.timer will "
                          "take themisd for gone after failopen.after_s (%g s)", path, e.strerror or e,
                          self.cfg.failopen.after_s)
            self._beat_failed = True
            return
        if self._beat_failed:
            log.info("heartbeat %s written again", path)
        self._beat_failed = False

    def _storage_failed(self, daemon: Daemon, problem: str, e: sqlite3.Error) -> str:
        """Logs the first failed cycle of an episode (later ones at debug level) and counts every one.

        The failed transaction was rolled back (Store.tx) and the cycle stopped at it, before the Slurm
        action it was for. A round whose decision could not be recorded must run again: reloading the same
        config drops the daemon's idle signature (and its calibration cache, read again from the store).
        """
        self.metrics.state_errors.labels(problem).inc()
        daemon.reload(daemon.cfg)
        if self.outage is not None and self.outage.problem == problem:
            self.outage.cycles += 1
            log.debug("state database %s still not writable (%s): %s", self.cfg.db_path, problem, e)
        else:
            log.error("%s; themisd retries every cycle and takes no Slurm action it cannot record first",
                      storage_message(self.cfg.db_path, e))
            self.outage = Outage(problem, time.monotonic())
        return f"mode={daemon.cfg.mode} state database not writable ({problem}): retrying every cycle"

    def _start_api(self, daemon: Daemon):  # type: ignore[no-untyped-def]
        """The read-only status API on api.listen, fed by the daemon's last snapshot; never fatal."""
        if not self.cfg.api.listen:
            return None
        try:
            api = self.cfg.api
            server = start_api_server(self.cfg.db_path, api.listen, self.cfg.slurm.slurm_conf or None,
                                      workers=api.workers, backlog=api.backlog, timeout=api.request_timeout_s,
                                      write_timeout=api.write_timeout_s, max_connections=api.max_connections,
                                      partitions=self.cfg.slurm.partitions, operators=self.cfg.api.operators,
                                      snapshot=lambda: daemon.last_snapshot,
                                      last_cycle=lambda: daemon.last_cycle_time,
                                      pending_actions=daemon.pending_actions,
                                      round_terms=lambda: daemon.cfg.round_terms)
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
