"""A baseline policy's allocation scratchpad for one call, and the conventions every baseline shares.

Every baseline works the same way inside one call: it ranks jobs its own way, then places them one by one
on a :class:`~themis_slurm.core.placement.Pool` of free GPUs (so gangs are whole and node shapes are
respected by construction), optionally preempting running jobs it ranks lower. A
:class:`BaselineScratchpad` holds that working state for one call (it has nothing to do with a Themis
round); :meth:`BaselineScratchpad.decision` turns it into a :class:`Decision` with an :class:`AppRecord`
for every app, so `explain` works for baselines exactly as for Themis. The state a call gets is checked
by :func:`themis_slurm.core.state.check_state`, the same check the Themis arbiter makes; the decision a
baseline returns is checked by the caller (:mod:`themis_slurm.sim.validate` in the simulator).

Conventions shared by all baselines (each module restates what it relies on):

* A job is *running* when it holds a lease; every other job of an app in the state is *waiting*, whatever
  its estimated remaining work (an estimate can be exceeded; the job still has to finish).
* A running job preempted in this call may be granted other GPUs in the same call: that is a migration
  (a Preemption of its old GPUs plus a Grant with ``migrated=True``), the same encoding the arbiter uses.
* Running jobs keep their GPUs unless preempted; an expired lease that the policy keeps is renewed (with
  the expiry the policy asks for, ``inf`` by default), so a caller that re-offers expired leases is
  never left guessing.
* Non-preemptible jobs are never victims.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from themis_slurm.core.decision import (
    AppRecord,
    Decision,
    Grant,
    GrantSource,
    LazyRecords,
    Preemption,
    PreemptionCause,
    Renewal,
    RenewalCause,
)
from themis_slurm.core.placement import Pool
from themis_slurm.core.state import ClusterState, check_state
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job, Lease
from themis_slurm.policies.app_records import app_records
from themis_slurm.policies.fit import INF, Placer, consolidated_level, shape_fit


@dataclass
class BaselineScratchpad:
    """A baseline's allocation scratchpad for one call: the pool of free GPUs, what was granted and
    preempted, and why.

    Mutable on purpose and private to one call (like the arbiter's Pool). Building one checks the state
    (:func:`~themis_slurm.core.state.check_state`: job ids unique, no GPU claimed twice, no lease of
    an unknown job); ValueError otherwise.
    """

    state: ClusterState
    policy: str
    topo: Topology = field(init=False)
    now: float = field(init=False)
    #: by id, for lookups: in no set order (check_state); state.apps has it
    jobs: dict[str, Job] = field(init=False)
    apps: dict[str, App] = field(init=False)
    running: dict[str, Lease] = field(init=False)
    pool: Pool = field(init=False)
    granted: dict[str, Grant] = field(init=False, default_factory=dict)
    preempted: dict[str, str] = field(init=False, default_factory=dict)
    renew: dict[str, float] = field(init=False, default_factory=dict)
    _why: dict[str, str] = field(init=False, default_factory=dict)
    _later: list[Callable[[BaselineScratchpad], None]] = field(init=False, default_factory=list)
    _settling: bool = field(init=False, default=False)
    _kept: dict[str, Lease] = field(init=False, default_factory=dict)
    notes: dict[str, list[str]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        s = self.state
        self.topo, self.now = s.topology, s.now
        self.apps = {a.id: a for a in s.apps}
        self.jobs = check_state(s)
        self.running = {lease.job_id: lease for lease in s.leases}
        self._kept = dict(self.running)
        self.pool = Pool(self.topo, s.free)
        self.granted = {}
        self.preempted = {}
        self.renew = {}
        self._why = {}
        self._later = []
        self._settling = False
        self.notes = {}

    # ----------------------------------------------------------------- views
    @property
    def why_wait(self) -> dict[str, str]:
        """Why each waiting job waits, by job id (the dictionary itself: policies may reword entries).

        The wording put off with :meth:`later` (a whole tail of a ranking at once, the reason each app's
        record reports) is done here first, in the order it was asked for: a full cluster's queue of
        thousands is named job by job only when someone reads the reasons (the simulator never does, see
        Decision.apps)."""
        if self._later and not self._settling:
            self._settle()
        return self._why

    def waiting(self) -> list[Job]:
        """Jobs without GPUs at the start of the call, in app order then job order (deterministic)."""
        return [j for a in self.state.apps for j in a.jobs if j.id not in self.running]

    def holding(self) -> dict[str, Lease]:
        """Running jobs that still hold their GPUs (not preempted so far in this call). Read-only view."""
        return self._kept

    def is_active(self, job_id: str) -> bool:
        """Holds GPUs at the end of the call as things stand (kept or granted)."""
        return job_id in self.granted or job_id in self._kept

    def app_gpus(self) -> dict[str, int]:
        """GPUs held per app as things stand in this call."""
        out = dict.fromkeys(self.apps, 0)
        for jid, lease in self.holding().items():
            out[self.jobs[jid].app_id] += len(lease.gpus)
        for g in self.granted.values():
            out[g.app_id] += len(g.gpus)
        return out

    # ----------------------------------------------------------------- placement
    def fit(
        self,
        job: Job,
        *,
        gpus: int | None = None,
        consolidate: bool = False,
        pool: Pool | None = None,
        within: Iterable[str] | None = None,
    ) -> frozenset[int] | None:
        """The tightest placement of `job` in the pool, or None. `consolidate` rejects placements wider
        than :func:`consolidated_level` (a job that would rather wait than spread)."""
        p = self.pool if pool is None else pool
        got = shape_fit(job, p, gpus, within)
        if (
            got is not None
            and consolidate
            and self.topo.level_of(got) > consolidated_level(self.topo, job, gpus)
        ):
            return None
        return got

    def grant(
        self, job: Job, gpus: frozenset[int], expiry: float = INF, source: GrantSource = GrantSource.POLICY
    ) -> Grant:
        """Start `job` on `gpus` (taken from the pool)."""
        if self.is_active(job.id):
            raise ValueError(f"job {job.id} already holds GPUs")
        self.pool.take(gpus)
        g = Grant(
            job_id=job.id,
            app_id=job.app_id,
            gpus=gpus,
            nodes=self.topo.nodes_of(gpus),
            level=self.topo.level_of(gpus).label,
            lease_expiry=expiry,
            source=source,
            migrated=job.id in self.preempted,
        )
        if self._later:  # wording put off until now sees who waited before this start
            self._settle()
        self.granted[job.id] = g
        self._why.pop(job.id, None)
        return g

    def preempt(self, job_id: str, reason: str) -> None:
        """Take a running job's GPUs back into the pool."""
        if job_id not in self.running or job_id in self.preempted:
            raise ValueError(f"job {job_id} is not running")
        if not self.jobs[job_id].preemptible:
            raise ValueError(f"job {job_id} is not preemptible")
        if self._later:  # wording put off until now sees who waited before this job stops
            self._settle()
        self.preempted[job_id] = reason
        del self._kept[job_id]
        self.pool.give(self.running[job_id].gpus)

    def restore(self, job_id: str) -> None:
        """Undo :meth:`preempt` (its GPUs must still be in the pool)."""
        if self._later:
            self._settle()
        self.pool.take(self.running[job_id].gpus)
        del self.preempted[job_id]
        self._kept[job_id] = self.running[job_id]

    def fit_with_preemption(
        self, job: Job, victims: Sequence[str], placer: Placer, reason: str
    ) -> frozenset[int] | None:
        """Place `job`, preempting running jobs from `victims` (first = preempted first) until it fits.

        Victims whose GPUs the placement does not use are restored, so nobody is stopped for nothing.
        Returns the placement (not yet granted) or None, in which case nothing changed.
        """
        victims = [v for v in victims if v in self._kept and self.jobs[v].preemptible]
        if not victims or self.pool.size + sum(len(self.running[v].gpus) for v in victims) < job.min_gpus:
            return None
        taken: list[str] = []
        got: frozenset[int] | None = None
        for v in victims:
            self.preempt(v, reason)
            taken.append(v)
            got = placer(job, self.pool)
            if got is not None:
                break
        if got is None:
            for v in reversed(taken):
                self.restore(v)
            return None
        for v in reversed(taken):
            if self.running[v].gpus.isdisjoint(got):
                self.restore(v)
        return got

    def resize(self, job_id: str, gpus: frozenset[int]) -> None:
        """Move a grant made in this call to other GPUs (e.g. to grow an elastic job)."""
        old = self.granted[job_id]
        self.pool.give(old.gpus)
        try:
            self.pool.take(gpus)
        except ValueError:
            self.pool.take(old.gpus)
            raise
        self.granted[job_id] = replace(
            old, gpus=gpus, nodes=self.topo.nodes_of(gpus), level=self.topo.level_of(gpus).label
        )

    def set_expiry(self, expiry: float) -> None:
        """Give every grant of this call the lease expiry `expiry`."""
        self.granted = {jid: replace(g, lease_expiry=expiry) for jid, g in self.granted.items()}

    # ----------------------------------------------------------------- bookkeeping
    def wait(self, job: Job, why: str) -> None:
        if self._later and not self._settling:  # why_wait, inlined (called for every job of a long queue)
            self._settle()
        self._why.setdefault(job.id, why)

    def later(self, word: Callable[[BaselineScratchpad], None]) -> None:
        """Run ``word(pad)`` (which reads and writes waiting reasons, or adds notes) when the reasons are
        first read (:attr:`why_wait`; the lazy AppRecords read them before the notes) or before a grant,
        preemption or restore changes who holds GPUs, whichever comes first; put-off wordings run in the
        order they were asked for. So each sees the same reasons and the same holders as if run at once,
        and a call whose records nobody reads (the simulator's) words none of its queue.

        `word` gets the scratchpad as its argument and must not hold it otherwise: the simulator pauses
        the garbage collector, and a scratchpad in a reference cycle with its own wordings would outlive
        its call (measured: Tiresias 25% slower)."""
        self._later.append(word)

    def _settle(self) -> None:
        self._settling = True
        try:
            while self._later:
                self._later.pop(0)(self)
        finally:
            self._settling = False

    def wait_rest(self, ranked: Sequence[Job], start: int, why: str) -> None:
        """:meth:`wait` with `why` for every job of ``ranked[start:]`` that holds no GPUs (put off, see
        :meth:`later`): a full cluster's queue of thousands, without a pass over it at every call."""

        def word(pad: BaselineScratchpad) -> None:
            why_wait, granted, kept = pad._why, pad.granted, pad._kept
            for job in itertools.islice(ranked, start, None):
                jid = job.id
                if jid not in granted and jid not in kept:
                    why_wait.setdefault(jid, why)

        self.later(word)

    def explain_waiting(self, why: Callable[[Job, str | None], str]) -> None:
        """Set ``why(job, its reason so far)`` as the waiting reason of each app's first job (in app order)
        that holds no GPUs at the end of the call: the one reason its AppRecord reports (:meth:`decision`),
        so a contended queue of thousands is not formatted job by job (put off, see :meth:`later`)."""

        def word(pad: BaselineScratchpad) -> None:
            active, why_wait = pad.is_active, pad._why
            for app in pad.state.apps:
                for j in app.jobs:
                    if not active(j.id):
                        why_wait[j.id] = why(j, why_wait.get(j.id))
                        break

        self.later(word)

    def reported_waiting(self, app: App) -> Job | None:
        """The job whose waiting reason `app`'s AppRecord reports: its first, in app order, that has a reason
        and holds no GPUs as things stand. A policy that rewords reasons need only reword this one."""
        why, active = self.why_wait, self.is_active
        return next((j for j in app.jobs if j.id in why and not active(j.id)), None)

    def note(self, app_id: str, text: str) -> None:
        self.notes.setdefault(app_id, []).append(text)

    def renew_all(self, expiry: float) -> None:
        """Ask for every kept running job's lease to run until `expiry` (only expired ones are emitted
        unless the policy sets :attr:`renew` itself)."""
        for jid in self.holding():
            self.renew[jid] = expiry

    # ----------------------------------------------------------------- output
    def decision(self, order: Sequence[Job] = (), renew_expiry: float = INF) -> Decision:
        """The Decision, with an AppRecord per app (built when first read). `order` is the policy's ranking
        of the waiting jobs (for each app's rank); expired leases of kept jobs are renewed to `renew_expiry`,
        those in :attr:`renew` to the expiry asked for."""
        renewals: list[Renewal] = []
        for jid, lease in self.running.items():
            if jid not in self.preempted and (jid in self.renew or lease.expiry <= self.now):
                renewals.append(
                    Renewal(
                        jid,
                        self.jobs[jid].app_id,
                        lease.gpus,
                        self.renew.get(jid, renew_expiry),
                        RenewalCause.POLICY,
                        note=f"{self.policy}: keeps its GPUs",
                    )
                )
        preemptions = tuple(
            Preemption(
                jid,
                self.jobs[jid].app_id,
                self.running[jid].gpus,
                PreemptionCause.POLICY,
                note=f"{self.policy}: {why}",
            )
            for jid, why in self.preempted.items()
        )
        return Decision(
            now=self.now,
            grants=tuple(self.granted.values()),
            renewals=tuple(renewals),
            preemptions=preemptions,
            apps=LazyRecords(lambda: self._records(order)),
            solver=self.policy,
            offered_gpus=len(self.state.free),
            idle_gpus=self.pool.free_ids(),
        )

    def _records(self, order: Sequence[Job]) -> dict[str, AppRecord]:
        """An AppRecord per app (Decision.apps, built when first read: core/decision.LazyRecords)."""
        return app_records(self, order)
