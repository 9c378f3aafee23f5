"""Issue 37 part 2 on the real local cluster: themisd reads each node's GPU type from Slurm's Gres and the
speeds from themis.yaml ``gpu_types:``, starts an untyped job on the faster type, and counts a job's work at
its speed on the type it runs on. Needs a mixed cluster (``cluster.sh up --types a100,a100,h100,h100``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from test_daemon_e2e import (  # tests/slurm is on sys.path under pytest
    ALICE,
    BOB,
    Themisd,
    _no_foreign_held_jobs,  # noqa: F401  (autouse fixture: refuse a busy shared cluster)
    daemon_dir,  # noqa: F401  (fixture)
    make_themisd,
    submit,
)

from themis_slurm.slurm import hostlist

if TYPE_CHECKING:
    from conftest import Cluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture
def themisd(daemon_dir: Path, cluster: Cluster):  # noqa: F811  (daemon_dir is the imported fixture)
    slow = cluster.types[0]
    d = make_themisd(daemon_dir, cluster, gpu_types=f"{{{slow}: 0.25}}")
    yield d
    d.stop()


def test_untyped_jobs_go_to_the_faster_type_and_work_counts_at_its_speed(
    cluster: Cluster, themisd: Themisd
) -> None:
    """The first type of the cluster runs at 0.25: two whole-node untyped jobs both start on nodes of the
    other type, on their first grant; a job asking for the slow type runs there and counts a quarter of its
    service as done, the others all of it."""
    if len(set(cluster.types)) < 2:
        pytest.skip("needs a cluster of two GPU types: cluster.sh up --types a100,a100,h100,h100")
    slow, fast = cluster.types[0], next(t for t in cluster.types if t != cluster.types[0])
    untyped = [submit(cluster, ALICE, f"gpu:{cluster.gpus}", f"themis:app=u{i}", 60) for i in range(2)]
    typed = submit(cluster, BOB, f"gpu:{slow}:1", "themis:app=slow", 60)
    themisd.start()
    for jid in (*untyped, typed):
        cluster.wait_job(jid, "RUNNING", timeout=40)
    for jid in untyped:
        nodes = hostlist.expand(cluster.job(jid)["nodes"])
        assert {cluster.type_of(n) for n in nodes} == {fast}, (jid, nodes)
    assert {cluster.type_of(n) for n in hostlist.expand(cluster.job(typed)["nodes"])} == {slow}
    time.sleep(6)  # a few cycles of counted service
    with themisd.db() as db:
        rows = {r[0]: (r[1], r[2]) for r in db.execute("SELECT job_id, service_s, done_service FROM jobs")}
        timeouts = db.execute("SELECT COUNT(*) FROM events WHERE kind = 'release-timeout'").fetchone()[0]
        grants = dict(
            db.execute("SELECT job_id, COUNT(*) FROM decisions WHERE action = 'grant' GROUP BY job_id")
        )
    assert timeouts == 0
    assert all(grants.get(str(j)) == 1 for j in (*untyped, typed)), grants
    service, done = rows[str(typed)]
    assert service > 0 and done / service == pytest.approx(0.25, rel=1e-6), rows[str(typed)]
    for jid in untyped:
        service, done = rows[str(jid)]
        assert service > 0 and done / service == pytest.approx(1.0, rel=1e-6), rows[str(jid)]
    assert "Traceback" not in themisd.log.read_text()
