"""policies.queue_order.in_key_order: three stable sorts give the order of one sort on (key, submit, id) tuples."""

from __future__ import annotations

import random

import pytest

from themis_slurm.core.workload import Job
from themis_slurm.policies.queue_order import in_key_order


@pytest.mark.parametrize("seed", range(40))
def test_ranked_is_the_tuple_order(seed: int) -> None:
    """Random jobs with many ties in the key and in submit (and -0.0 beside 0.0, which compare equal),
    ascending and descending, against sorted() on the tuples the policies used to build."""
    rng = random.Random(seed)
    jobs = []
    for i in range(rng.randint(0, 60)):
        jobs.append(Job(f"a{rng.randint(0, 5)}/j{i:03d}", "a", 1, 100.0, submit=float(rng.randint(0, 4))))
    key = {j.id: rng.choice([0.0, -0.0, 1.5, -2.0, float(rng.randint(0, 3))]) for j in jobs}
    by_id = {j.id: j for j in jobs}
    rng.shuffle(jobs)
    assert in_key_order(jobs, key, by_id) == [t[3] for t in sorted((key[j.id], j.submit, j.id, j) for j in jobs)]
    assert in_key_order(jobs, key, by_id, descending=True) == [
        t[3] for t in sorted((-key[j.id], j.submit, j.id, j) for j in jobs)
    ]
