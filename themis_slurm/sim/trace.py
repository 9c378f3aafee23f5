"""Trace records shared by the loaders, the paper-workload generator and the simulator.

A trace is a list of jobs, each belonging to an app (Themis's unit of fairness: a group of jobs such as a
hyperparameter sweep). The records hold only what every source can give: when a job arrives, how many GPUs it
gangs, how long it runs on them with ideal placement, and which model it trains (for placement sensitivity).
Everything here is pure data; the simulator builds its own App/Job objects from it.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from os import PathLike

from themis_slurm.core.placement import PROFILES, SENS_CLASSES

# Model names of the placement profiles (authors' model_stats/themis/*.json, see docs: themis-facts.md,
# "Placement sensitivity"). The core placement model must use the same names.
PROFILE_MODELS: tuple[str, ...] = (
    "vgg11",
    "vgg16",
    "vgg19",
    "alexnet",
    "resnet50",
    "resnet101",
    "resnet152",
    "inception3",
    "inception4",
    "googlenet",
)
#: Every model a trace may name: the paper's ten above (which the paper's workload draws from) and the
#: modern classes of the core (transformer-dp, transformer-tp, moe, finetune), e.g. in a replayed sacct
#: history whose jobs gave --themis-model=moe.
TRACE_MODELS: frozenset[str] = frozenset(n for n in PROFILES if n not in SENS_CLASSES)
assert set(PROFILE_MODELS) <= TRACE_MODELS, "the paper's models are core profiles"
# Network-heavy models: cross-machine factor <= 0.80 in the authors' profiles; the rest are >= 0.98.
SENSITIVE_MODELS: frozenset[str] = frozenset({"vgg11", "vgg16", "vgg19", "alexnet"})
INSENSITIVE_MODELS: frozenset[str] = frozenset(PROFILE_MODELS) - SENSITIVE_MODELS

_MODEL_ALIASES: dict[str, str] = {
    "inceptionv3": "inception3",
    "inceptionv4": "inception4",
    "vgg11bn": "vgg11",
    "vgg16bn": "vgg16",
    "vgg19bn": "vgg19",
}
_PARENS = re.compile(r"\([^)]*\)")
_NON_ALNUM = re.compile(r"[^a-z0-9]")


def normalize_model(raw: str | None) -> str | None:
    """Map a source's model name to a placement-profile name, or None when there is no profile.

    Sources spell models differently ('inception_v3', 'ResNet-50 (batch size 64)', 'VGG16'); the simulator
    knows the profile names (:data:`TRACE_MODELS`: a modern class is matched by its exact name, e.g. 'moe',
    'transformer-dp'), and anything else gets its default sensitivity.
    """
    if raw is None:
        return None
    exact = raw.strip().lower()
    if exact in TRACE_MODELS:
        return exact
    key = _NON_ALNUM.sub("", _PARENS.sub("", raw).lower())
    key = _MODEL_ALIASES.get(key, key)
    return key if key in PROFILE_MODELS else None


def _format_problem(
    path: str, line: int | None, field_name: str | None, value: str | None, expected: str
) -> str:
    where = f"{path}:{line}" if line is not None else path
    if field_name is None:
        return f"{where}: {expected}"
    if value is None:
        return f"{where}: field {field_name}: {expected}"
    return f"{where}: field {field_name}: value {value!r} is not {expected}"


class TraceError(ValueError):
    """A trace file that cannot be read as asked, located to file:line and field.

    The message reads like a compiler's, e.g.
    ``trace.csv:17: field num_gpu: value '0' is not a positive integer``, so a user can open the file at
    the right line. ``line`` is None for problems with the whole file (empty, unreadable); ``field`` is None
    when no single field is at fault, and then ``expected`` is the whole explanation.
    """

    def __init__(
        self,
        path: str | PathLike[str],
        line: int | None,
        field: str | None,
        value: str | None,
        expected: str,
    ) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.value = value
        self.expected = expected
        super().__init__(_format_problem(self.path, line, field, value, expected))


@dataclass(frozen=True)
class BadRow:
    """One row a loader skipped (``skip_bad=True``), with the same details a TraceError would carry."""

    path: str
    line: int | None
    field: str | None
    value: str | None
    expected: str

    @classmethod
    def from_error(cls, error: TraceError) -> BadRow:
        return cls(error.path, error.line, error.field, error.value, error.expected)

    @property
    def message(self) -> str:
        return _format_problem(self.path, self.line, self.field, self.value, self.expected)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace.

    Attributes:
        job_id: unique within the trace.
        app_id: the app (group of jobs) the job belongs to.
        user: who submitted it (the app id when the source has no user).
        arrival_s: submission time, seconds from the trace's origin (>= 0).
        gpus: GPUs the job gangs (its maximum parallelism).
        duration_s: run time on ``gpus`` GPUs with ideal (same-machine) placement, seconds.
        model: placement-profile name (see TRACE_MODELS) or None for the simulator's default sensitivity.
        line: line in the source file, for messages; None for generated jobs.
        estimate_s: what the submitter estimated the run to take (a Slurm time limit), seconds; None when the
            source has none (or the limit was unlimited).
        actual_start_s, actual_end_s: when the job really started and ended (a replayed Slurm history), on
            the same clock as ``arrival_s``; None for sources that do not record them. Both or neither.
        account: the Slurm account (or the source's equivalent: a Philly virtual cluster) the job ran under,
            ``""`` when the source has none. With tenancy levels (``SimConfig.tenancy``) it is the top of the
            account -> user -> app tree an app's share comes from; an app takes its first job's account.
        checkpoint_s: how the job saves its state: None (the default) at Themis's warning, so a preemption
            costs only the restart; ``math.inf`` never, so a preemption throws away everything it did (it
            restarts from zero); a number, every that many seconds of its run, so a preemption throws away
            what it did since its last checkpoint (``--themis-ckpt=no|<interval>`` on a real cluster).
        speeds: its speed on each GPU type relative to the one ``duration_s`` is measured on, as
            ((type, speed), ...) (:attr:`Job.speeds <themis_slurm.core.workload.Job.speeds>`; Gavel's
            measured per-type rates); () for the cluster's default per type (core/gpu_types.py).
    """

    job_id: str
    app_id: str
    user: str
    arrival_s: float
    gpus: int
    duration_s: float
    model: str | None = None
    line: int | None = None
    estimate_s: float | None = None
    actual_start_s: float | None = None
    actual_end_s: float | None = None
    account: str = ""
    checkpoint_s: float | None = None
    speeds: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        for t, v in self.speeds:
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"job {self.job_id!r}: speed on GPU type {t!r} must be finite and >= 0, got {v!r}")
        if not self.job_id or not self.app_id:
            raise ValueError(f"job {self.job_id!r}: job_id and app_id must be non-empty")
        if not isinstance(self.account, str):
            raise ValueError(f"job {self.job_id!r}: account must be a string, got {self.account!r}")
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
            raise ValueError(f"job {self.job_id!r}: gpus must be a positive integer, got {self.gpus!r}")
        if not (math.isfinite(self.arrival_s) and self.arrival_s >= 0):
            raise ValueError(f"job {self.job_id!r}: arrival_s must be finite and >= 0, got {self.arrival_s!r}")
        if not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise ValueError(f"job {self.job_id!r}: duration_s must be finite and > 0, got {self.duration_s!r}")
        if self.model is not None and self.model not in TRACE_MODELS:
            raise ValueError(f"job {self.job_id!r}: model {self.model!r} is not a profile name {sorted(TRACE_MODELS)}")
        if self.estimate_s is not None and not (math.isfinite(self.estimate_s) and self.estimate_s > 0):
            raise ValueError(f"job {self.job_id!r}: estimate_s must be finite and > 0, got {self.estimate_s!r}")
        if self.checkpoint_s is not None and not self.checkpoint_s > 0:
            raise ValueError(f"job {self.job_id!r}: checkpoint_s must be > 0 seconds (inf: never), got "
                             f"{self.checkpoint_s!r}")
        if (self.actual_start_s is None) != (self.actual_end_s is None):
            raise ValueError(f"job {self.job_id!r}: give both actual_start_s and actual_end_s, or neither")
        if self.actual_start_s is not None and self.actual_end_s is not None and not (
            math.isfinite(self.actual_start_s) and math.isfinite(self.actual_end_s)
            and self.actual_end_s >= self.actual_start_s
        ):
            raise ValueError(f"job {self.job_id!r}: actual start/end must be finite with end >= start, got "
                             f"{self.actual_start_s!r}, {self.actual_end_s!r}")

    @property
    def has_actual(self) -> bool:
        """True when the source recorded when the job really ran (see actual_start_s)."""
        return self.actual_start_s is not None

    @property
    def gpu_seconds(self) -> float:
        """Work of the job in GPU-seconds (ideal placement)."""
        return self.gpus * self.duration_s


@dataclass(frozen=True)
class TraceStats:
    """Summary statistics, the ones the Themis paper publishes for its workload (see workload_paper)."""

    n_apps: int
    n_jobs: int
    jobs_per_app_median: float
    jobs_per_app_mean: float
    jobs_per_app_max: int
    duration_median_s: float
    duration_mean_s: float
    duration_max_s: float
    gpus: tuple[tuple[int, int], ...]  # (gpus, number of jobs), ascending gpus
    models: tuple[tuple[str | None, int], ...]  # (model, number of jobs), most common first
    first_arrival_s: float
    last_arrival_s: float
    gpu_seconds: float


@dataclass(frozen=True)
class Trace:
    """An immutable workload: jobs sorted by arrival (stable), plus where it came from.

    Attributes:
        jobs: sorted by arrival_s; ties keep the source order.
        source: file path or generator description.
        skipped: rows the loader skipped as bad (``skip_bad=True``).
        notes: human-readable remarks (skipped rows, unknown models, assumptions, transformations).
        bad_rows: the skipped rows, in file order.
    """

    jobs: tuple[TraceJob, ...]
    source: str
    skipped: int = 0
    notes: tuple[str, ...] = ()
    bad_rows: tuple[BadRow, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        jobs = tuple(sorted(self.jobs, key=lambda j: j.arrival_s))
        object.__setattr__(self, "jobs", jobs)
        object.__setattr__(self, "notes", tuple(self.notes))
        object.__setattr__(self, "bad_rows", tuple(self.bad_rows))
        seen: set[str] = set()
        for job in jobs:
            if job.job_id in seen:
                raise ValueError(f"duplicate job_id {job.job_id!r} in trace {self.source}")
            seen.add(job.job_id)
        if self.skipped < 0:
            raise ValueError("skipped must be >= 0")

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self) -> Iterator[TraceJob]:
        return iter(self.jobs)

    def apps(self) -> tuple[str, ...]:
        """App ids in order of first arrival."""
        return tuple(dict.fromkeys(j.app_id for j in self.jobs))

    def by_app(self) -> dict[str, tuple[TraceJob, ...]]:
        """Jobs of each app (arrival order), apps in order of first arrival."""
        groups: dict[str, list[TraceJob]] = {}
        for job in self.jobs:
            groups.setdefault(job.app_id, []).append(job)
        return {app: tuple(jobs) for app, jobs in groups.items()}

    def app_arrivals(self) -> dict[str, float]:
        """First arrival of each app, in order of first arrival."""
        first: dict[str, float] = {}
        for job in self.jobs:
            first.setdefault(job.app_id, job.arrival_s)
        return first

    def _derive(self, jobs: Iterable[TraceJob], note: str) -> Trace:
        return replace(self, jobs=tuple(jobs), notes=(*self.notes, note))

    def shifted(self) -> Trace:
        """The same trace with times moved so that the first arrival is 0."""
        if not self.jobs or self.jobs[0].arrival_s == 0:
            return self
        t0 = self.jobs[0].arrival_s

        def moved(j: TraceJob) -> TraceJob:
            if j.actual_start_s is None or j.actual_end_s is None:
                return replace(j, arrival_s=j.arrival_s - t0)
            return replace(j, arrival_s=j.arrival_s - t0, actual_start_s=j.actual_start_s - t0,
                           actual_end_s=j.actual_end_s - t0)  # fmt: skip

        return self._derive((moved(j) for j in self.jobs), f"shifted by {-t0:g} s")

    def scaled(self, arrival_factor: float = 1.0, duration_factor: float = 1.0) -> Trace:
        """Multiply arrival times and/or run times, e.g. to compress a trace for a quick simulation."""
        for name, factor in (("arrival_factor", arrival_factor), ("duration_factor", duration_factor)):
            if not (math.isfinite(factor) and factor > 0):
                raise ValueError(f"{name} must be finite and > 0, got {factor!r}")
        actual = any(j.has_actual for j in self.jobs)
        return self._derive(
            (
                replace(j, arrival_s=j.arrival_s * arrival_factor, duration_s=j.duration_s * duration_factor,
                        estimate_s=None if j.estimate_s is None else j.estimate_s * duration_factor,
                        actual_start_s=None, actual_end_s=None)  # a scaled trace is no longer what happened
                for j in self.jobs
            ),
            f"scaled: arrivals x{arrival_factor:g}, durations x{duration_factor:g}"
            + ("; the actual start/end times were dropped" if actual else ""),
        )

    def head_apps(self, n: int) -> Trace:
        """Only the first ``n`` apps (by first arrival), with all their jobs."""
        if n < 0:
            raise ValueError("n must be >= 0")
        keep = set(self.apps()[:n])
        return self._derive((j for j in self.jobs if j.app_id in keep), f"truncated to the first {n} apps")

    def head_jobs(self, n: int) -> Trace:
        """Only the first ``n`` jobs by arrival."""
        if n < 0:
            raise ValueError("n must be >= 0")
        return self._derive(self.jobs[:n], f"truncated to the first {n} jobs")

    def with_models(self, models: Mapping[str, str | None]) -> Trace:
        """Set the model of every job of the apps named in ``models`` (app id -> profile name or None)."""
        return self._derive(
            (replace(j, model=models[j.app_id]) if j.app_id in models else j for j in self.jobs),
            f"models set for {len(models)} apps",
        )

    def stats(self) -> TraceStats:
        """Summary statistics; raises ValueError on an empty trace."""
        if not self.jobs:
            raise ValueError(f"trace {self.source} has no jobs")
        per_app = [len(v) for v in self.by_app().values()]
        durations = [j.duration_s for j in self.jobs]
        gpus = Counter(j.gpus for j in self.jobs)
        models = Counter(j.model for j in self.jobs)
        return TraceStats(
            n_apps=len(per_app),
            n_jobs=len(self.jobs),
            jobs_per_app_median=float(statistics.median(per_app)),
            jobs_per_app_mean=statistics.fmean(per_app),
            jobs_per_app_max=max(per_app),
            duration_median_s=float(statistics.median(durations)),
            duration_mean_s=statistics.fmean(durations),
            duration_max_s=max(durations),
            gpus=tuple(sorted(gpus.items())),
            models=tuple(models.most_common()),
            first_arrival_s=self.jobs[0].arrival_s,
            last_arrival_s=self.jobs[-1].arrival_s,
            gpu_seconds=math.fsum(j.gpu_seconds for j in self.jobs),
        )
