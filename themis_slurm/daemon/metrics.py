"""Prometheus metrics of themisd (prefix ``themis_``; prometheus-slurm-exporter already owns ``slurm_*``).

Each daemon gets its own registry, so tests can run several daemons in one process and read values back;
:meth:`Metrics.serve` exposes it on the configured address. The list with meanings is in
docs/admin-guide.md ("Metrics").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from themis_slurm.slurm.model import ManagedJob
from themis_slurm.state.intents import Intent
from themis_slurm.state.rows import AppRow
from themis_slurm.tenant_levels import Level, Member

RHO_BUCKETS = (0.5, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


def tenant_members(apps: Mapping[str, AppRow], managed: Iterable[ManagedJob]) -> list[Member]:
    """The active apps as tenant_levels.summarise takes them: account, owner, last rho, GPUs and jobs now."""
    gpus: dict[str, int] = {}
    running: dict[str, int] = {}
    waiting: dict[str, int] = {}
    for m in managed:
        if m.state == "RUNNING":
            gpus[m.app_key] = gpus.get(m.app_key, 0) + m.gpus
            running[m.app_key] = running.get(m.app_key, 0) + 1
        elif m.state == "PENDING":
            waiting[m.app_key] = waiting.get(m.app_key, 0) + 1
    return [Member(k, a.owner, a.account, bool(a.active), a.rho, None, gpus.get(k, 0), running.get(k, 0),
                   waiting.get(k, 0)) for k, a in apps.items()]


class Metrics:
    """All of themisd's metrics, registered in a private registry."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.apps = Gauge("themis_apps", "Apps with at least one active managed job", registry=r)
        self.jobs = Gauge("themis_jobs", "Managed jobs by Themis intent", ["intent"], registry=r)
        self.rho = Histogram("themis_rho", "Finish-time fairness rho of each app after each round",
                             buckets=RHO_BUCKETS, registry=r)
        self.rho_worst = Gauge("themis_rho_worst", "Largest rho among apps after the last round", registry=r)
        self.gpus = Gauge("themis_gpus", "Managed-partition GPUs by state", ["state"], registry=r)
        self.rounds = Counter("themis_rounds", "Arbiter rounds run", ["mode"], registry=r)
        self.round_seconds = Histogram("themis_round_duration_seconds", "Wall time of one arbiter round",
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.cycle_seconds = Histogram("themis_cycle_duration_seconds", "Wall time of one poll cycle",
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.decisions = Counter("themis_decisions", "Grants, renewals and preemptions decided",
                                 ["action", "mode"], registry=r)
        self.preemptions = Counter("themis_preemptions", "Jobs warned because their lease was lost",
                                   registry=r)
        self.events = Counter("themis_reconcile_events", "Reconciliation corrections by kind", ["kind"],
                              registry=r)
        self.placement_mismatch = Counter(
            "themis_placement_mismatch", "Started jobs whose GPUs (chosen by Slurm inside a node) differ from "
            "the plan, by whether the placement level differs too", ["level_changed"], registry=r)
        self.slurm_calls = Counter("themis_slurm_calls", "Slurm commands run", registry=r)
        self.slurm_errors = Counter("themis_slurm_errors", "Failed Slurm reads and actions", ["action"],
                                    registry=r)
        self.slurm_seconds = Histogram("themis_slurm_call_duration_seconds",
                                       "Wall time of Slurm reads (snapshot) and actions", ["action"],
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.actions_retrying = Gauge("themis_slurm_actions_retrying", "Slurm actions that failed or were put "
                                      "off and are retried every cycle (themis status lists them)", registry=r)
        self.last_cycle = Gauge("themis_last_cycle_timestamp_seconds", "Unix time of the last finished cycle",
                                registry=r)
        self.calibration_samples = Counter(
            "themis_calibration_samples", "Managed jobs that ended COMPLETED and joined their user's estimate "
            "calibration history", registry=r)
        self.calibration_users = Gauge("themis_calibration_users", "Users whose estimates carry their own "
                                       "calibration factor (enough finished jobs)", registry=r)
        self.calibration_cluster = Gauge("themis_calibration_cluster_factor", "Calibration factor of users "
                                         "without enough history of their own (1: none)", registry=r)
        self.state_errors = Counter(
            "themis_state_errors", "Poll cycles abandoned because the state database could not be written "
            "(problem: full, io, readonly); retried every cycle", ["problem"], registry=r)
        self.config_reloads = Counter("themis_config_reloads", "SIGHUP reloads by result", ["result"],
                                      registry=r)
        # tenancy levels (issue 33): one series per account and user with work now, removed when it has none
        # left, so the label sets stay as many as the active tenants (none with tenancy.levels [app])
        tenant = ["level", "account", "user"]
        self.tenant_gpus = Gauge("themis_tenant_gpus", "GPUs held now by the running jobs of each account and "
                                 "user with work (tenancy levels)", tenant, registry=r)
        self.tenant_share = Gauge("themis_tenant_share", "Fraction of the cluster each account and user with "
                                  "work is owed now (its apps' nested shares, summed)", tenant, registry=r)
        self.tenant_quota = Gauge("themis_tenant_quota", "GPUs the last round let each account and user hold "
                                  "(its quota; an account: its users' together)", tenant, registry=r)
        self.tenant_rho = Gauge("themis_tenant_rho_worst", "Largest rho among the apps of each account and user "
                                "after the last round", tenant, registry=r)
        self._tenants: set[tuple[str, str, str]] = set()
        self._tenant_quota: set[tuple[str, str, str]] = set()
        self._tenant_rho: set[tuple[str, str, str]] = set()

    def serve(self, address: tuple[str, int]) -> None:
        """Starts the /metrics HTTP endpoint in a daemon thread."""
        start_http_server(address[1], addr=address[0], registry=self.registry)

    def set_gpus(self, counts: Mapping[str, int]) -> None:
        for state, n in counts.items():
            self.gpus.labels(state).set(n)

    def set_jobs(self, intents: Iterable[str]) -> None:
        counts: dict[str, int] = {}
        for i in intents:
            counts[i] = counts.get(i, 0) + 1
        for i in Intent:
            self.jobs.labels(i).set(counts.get(i, 0))

    def set_tenants(self, levels: Iterable[Level]) -> None:
        """The tenant gauges of this cycle's accounts and users (tenant_levels.summarise); the series of
        those gone, or of a quota or rho no longer known, are removed."""
        seen: set[tuple[str, str, str]] = set()
        quota: set[tuple[str, str, str]] = set()
        rho: set[tuple[str, str, str]] = set()
        for lv in levels:
            key = (lv.level, lv.account, lv.user)
            seen.add(key)
            self.tenant_gpus.labels(*key).set(lv.gpus)
            self.tenant_share.labels(*key).set(lv.share or 0.0)
            if lv.quota is not None:
                quota.add(key)
                self.tenant_quota.labels(*key).set(lv.quota)
            if lv.rho is not None:
                rho.add(key)
                self.tenant_rho.labels(*key).set(lv.rho)
        for gauges, old, new in (((self.tenant_gpus, self.tenant_share), self._tenants, seen),
                                 ((self.tenant_quota,), self._tenant_quota, quota),
                                 ((self.tenant_rho,), self._tenant_rho, rho)):
            for key in old - new:
                for g in gauges:
                    g.remove(*key)
        self._tenants, self._tenant_quota, self._tenant_rho = seen, quota, rho

    def value(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """A sample's current value (tests and the benchmark read metrics back through this)."""
        v = self.registry.get_sample_value(name, dict(labels or {}))
        return 0.0 if v is None else v
