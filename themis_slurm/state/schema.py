"""The schema of themisd's database: versioned, one migration per version.

``schema_version`` holds the version and :data:`MIGRATIONS` lists the steps from one version to the next;
opening a database applies the missing steps in one transaction each (:class:`~themis_slurm.state.store.Store`).
Never edit a released migration: append a new one. What each table holds is said where its rows are typed
(:mod:`themis_slurm.state.rows`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_V1 = """
CREATE TABLE apps (
    app_key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    arrival REAL NOT NULL,
    clock_since REAL NOT NULL,
    clock_last REAL NOT NULL,
    clock_integral REAL NOT NULL,
    clock_current REAL NOT NULL,
    finished_work REAL NOT NULL DEFAULT 0,
    peak_gpus INTEGER NOT NULL DEFAULT 0,
    service_s REAL NOT NULL DEFAULT 0,
    active INTEGER NOT NULL DEFAULT 1,
    rho REAL
);
CREATE TABLE jobs (
    job_id TEXT PRIMARY KEY,
    slurm_id INTEGER NOT NULL,
    app_key TEXT NOT NULL,
    intent TEXT NOT NULL,
    gpus INTEGER NOT NULL,
    work REAL NOT NULL,
    est_source TEXT NOT NULL DEFAULT '',
    est_note TEXT NOT NULL DEFAULT '',
    service_s REAL NOT NULL DEFAULT 0,
    done_service REAL NOT NULL DEFAULT 0,
    progress REAL,
    progress_note TEXT NOT NULL DEFAULT '',
    accounted_until REAL,
    planned_nodes TEXT NOT NULL DEFAULT '{}',
    planned_gpus TEXT NOT NULL DEFAULT '[]',
    grant_time REAL,
    lease_start REAL,
    lease_expiry REAL,
    release_time REAL,
    warn_time REAL,
    requeue_time REAL,
    adopted INTEGER NOT NULL DEFAULT 0,
    first_seen REAL NOT NULL
);
CREATE INDEX jobs_app ON jobs(app_key);
CREATE TABLE rounds (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    mode TEXT NOT NULL,
    trigger TEXT NOT NULL,
    solver TEXT NOT NULL,
    offered_gpus INTEGER NOT NULL,
    grants INTEGER NOT NULL,
    renewals INTEGER NOT NULL,
    preemptions INTEGER NOT NULL,
    latency_s REAL NOT NULL
);
CREATE TABLE decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    round_id INTEGER NOT NULL REFERENCES rounds(id),
    time REAL NOT NULL,
    app_key TEXT NOT NULL,
    job_id TEXT,
    action TEXT NOT NULL,
    reason TEXT NOT NULL,
    rho_before REAL,
    rho_after REAL,
    payment REAL,
    gpus INTEGER,
    nodes TEXT,
    lease_expiry REAL
);
CREATE INDEX decisions_job ON decisions(job_id);
CREATE INDEX decisions_app ON decisions(app_key);
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    job_id TEXT,
    app_key TEXT,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL
);
"""

#: v2: each round records the worst rho among the apps it saw (before its allocation), so that the rounds
#: table alone shows whether fairness improves over time (the demo summary, /v1/rounds).
_V2 = """
ALTER TABLE rounds ADD COLUMN worst_rho REAL;
"""

#: v3: decisions are data. Each decision row stores the typed outcome of the round (core.decision) in
#: columns, and sentences are made from them when shown (themis_slurm.reasons): app rows (and grant rows,
#: for the app they started) the AppRecord's outcome, rank, ranked, bid, won/kept/leftover GPUs, kept_by
#: and reservation; grant rows their source; renewal and preemption rows their cause (cut_s: a lease cut
#: by the hidden payment; instead_of: the job an in-place renewal kept from moving). Each round stores
#: its fairness knob (named when an app was not offered the pool). `reason` stays for rows written by
#: older daemons (shown as written, never parsed); new rows leave it empty.
_V3 = """
ALTER TABLE rounds ADD COLUMN fairness_knob REAL;
ALTER TABLE decisions ADD COLUMN outcome TEXT;
ALTER TABLE decisions ADD COLUMN rank INTEGER;
ALTER TABLE decisions ADD COLUMN ranked INTEGER;
ALTER TABLE decisions ADD COLUMN bid INTEGER;
ALTER TABLE decisions ADD COLUMN won_gpus INTEGER;
ALTER TABLE decisions ADD COLUMN kept_gpus INTEGER;
ALTER TABLE decisions ADD COLUMN kept_by TEXT;
ALTER TABLE decisions ADD COLUMN leftover_gpus INTEGER;
ALTER TABLE decisions ADD COLUMN reservation_job TEXT;
ALTER TABLE decisions ADD COLUMN reservation_gpus INTEGER;
ALTER TABLE decisions ADD COLUMN reservation_held INTEGER;
ALTER TABLE decisions ADD COLUMN reservation_start_in_s REAL;
ALTER TABLE decisions ADD COLUMN reservation_started INTEGER;
ALTER TABLE decisions ADD COLUMN source TEXT;
ALTER TABLE decisions ADD COLUMN cause TEXT;
ALTER TABLE decisions ADD COLUMN cut_s REAL;
ALTER TABLE decisions ADD COLUMN instead_of TEXT;
"""

#: v4: estimate calibration (core/calibration.py). Each job keeps the estimate it was given before
#: calibration (est_work, ideal GPU-seconds; 0 on rows of older daemons: no sample) and the factor applied
#: (est_factor); `finished_jobs` keeps, per user, the most recent jobs that ended COMPLETED with that
#: estimate and the work they really did, from which each user's factor is computed.
_V4 = """
ALTER TABLE jobs ADD COLUMN est_work REAL NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN est_factor REAL NOT NULL DEFAULT 1;
CREATE TABLE finished_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    user TEXT NOT NULL,
    app_key TEXT NOT NULL,
    time REAL NOT NULL,
    estimate REAL NOT NULL,
    work REAL NOT NULL
);
CREATE INDEX finished_jobs_user ON finished_jobs(user, id);
"""

#: v5: each job keeps the SubmitTime it had when themisd first saw it (submit_time; NULL on rows of older
#: daemons). Slurm resets SubmitTime at every requeue, and the arbiter reads a job's submit time as its
#: place on the app's private timeline (T_id's critical path, core/fairness.py): read afresh, every
#: preemption would push the job later and make its app look better off than it is.
_V5 = """
ALTER TABLE jobs ADD COLUMN submit_time REAL;
"""

#: v6: what a released job that Slurm kept pending taught (a QOS or association limit Themis cannot see on
#: a held job): the job is not granted again before `until`. Kept in memory only before, so a restart
#: granted the same impossible start again.
_V6 = """
CREATE TABLE learned (
    job_id TEXT PRIMARY KEY,
    why TEXT NOT NULL,
    until REAL NOT NULL
);
"""

#: v7: each app keeps the Slurm account its jobs run under (issue 33: the account -> user -> app tree its
#: share comes from, daemon/tenancy.py), set when the app arrives from its first job's account; '' on rows of
#: older daemons (filled from the app's jobs at the next cycle) and without accounting.
_V7 = """
ALTER TABLE apps ADD COLUMN account TEXT NOT NULL DEFAULT '';
"""

#: v8: each active tenant's book (issue 33: paced quotas, core/quota.py): what its share of the cluster has
#: owed it since it last became active (GPU-seconds, integrated at `frac` up to `updated`) and the work of
#: its jobs that finished since; the row goes when the tenant has no jobs left. `entity` is the core's
#: Entity as JSON: ["user", ["account", "user"]].
_V8 = """
CREATE TABLE tenants (
    entity TEXT PRIMARY KEY,
    entitled REAL NOT NULL,
    finished REAL NOT NULL,
    frac REAL NOT NULL,
    updated REAL NOT NULL
);
"""

#: v9: what the status API needs to show tenancy without asking Slurm (issue 33 item 5). `tenancy` holds one
#: row, the tree the rounds use (written when it changes): `levels` (JSON list), `tree` (JSON: the raw
#: shares of accounts and users, core/tenancy.Tenancy; tenant_levels.tenancy_json), `line` (what the log
#: said of it) and `read_at` (when it was last resolved: read from Slurm, or the config's flat tree; NULL for
#: the start fallback, read from nowhere). Each app record (decision rows with an AppRecord) keeps its tenant (the core's Entity as JSON,
#: NULL when flat), the tenant's quota in the round and the GPUs it held after it. decisions_round serves
#: "the last round's records" (the API asks it on every status request) without a scan of the audit log.
_V9 = """
CREATE TABLE tenancy (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    levels TEXT NOT NULL,
    tree TEXT NOT NULL,
    line TEXT NOT NULL DEFAULT '',
    read_at REAL,
    updated REAL NOT NULL
);
ALTER TABLE decisions ADD COLUMN tenant TEXT;
ALTER TABLE decisions ADD COLUMN tenant_quota REAL;
ALTER TABLE decisions ADD COLUMN tenant_gpus INTEGER;
CREATE INDEX decisions_round ON decisions(round_id);
"""

#: v10: what a preemption costs a job that does not save its state at Themis's warning (issue 34 item 2,
#: state/jobs.py "checkpoints"): the run themisd is counting (run_start, Slurm's StartTime) and the work
#: done when it began (run_base), the progress accepted when its last run ended (resumed_from) and whether
#: themisd learned how it saves (ckpt_learned: '', 'no' or 'yes'; daemon/planning.runs_settled).
_V10 = """
ALTER TABLE jobs ADD COLUMN run_start REAL;
ALTER TABLE jobs ADD COLUMN run_base REAL NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN resumed_from REAL;
ALTER TABLE jobs ADD COLUMN ckpt_learned TEXT NOT NULL DEFAULT '';
"""

#: Migration k brings the schema from version k to k+1 (version 0 is an empty database).
MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10)


def statements(script: str) -> list[str]:
    """The SQL statements of one migration, in order."""
    return [s.strip() for s in script.split(";") if s.strip()]


def expected_tables(migrations: Sequence[str]) -> list[str]:
    """The tables the migrations leave (CREATE TABLE minus DROP TABLE, in order)."""
    out: list[str] = []
    for script in migrations:
        for verb, name in re.findall(
            r"\b(CREATE|DROP)\s+TABLE\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?(\w+)", script, flags=re.IGNORECASE
        ):
            if verb.upper() == "CREATE" and name not in out:
                out.append(name)
            elif verb.upper() == "DROP" and name in out:
                out.remove(name)
    return out
