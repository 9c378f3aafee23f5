"""The pool's indexes and memo agree with the definitions they speed up (issue #13, Speed).

Placement tie-breaking depends on the history of the bucket sets, so these tests compare against
recomputation on the very same pool object, never against a rebuilt pool.
"""

from __future__ import annotations

import random

import pytest

from themis_slurm.core.placement import Pool
from themis_slurm.core.topology import Level, Topology


def _level_by_sets(topo: Topology, gpus) -> Level:
    """Topology.level_of as first written: the sets of islands, nodes and racks a GPU set spans."""
    islands = {topo.gpus[g].island for g in gpus}
    nodes = {topo.gpus[g].node for g in gpus}
    racks = {topo.gpus[g].rack for g in gpus}
    if len(racks) > 1:
        return Level.CLUSTER
    if len(nodes) > 1:
        return Level.RACK
    if len(islands) > 1:
        return Level.NODE
    return Level.ISLAND


def test_level_of_matches_the_set_definition() -> None:
    topo = Topology.uniform(3, 4, 8, islands_per_node=2)
    rng = random.Random(1)
    assert topo.level_of([]) is Level.ISLAND
    for _ in range(2000):
        k = rng.choice([1, 2, 3, 4, 5, 8, 9, 16])
        gpus = rng.sample(range(topo.size), k) if rng.random() < 0.5 else range(s := rng.randrange(topo.size - k), s + k)
        assert topo.level_of(gpus) == _level_by_sets(topo, list(gpus))


def test_memoised_best_fit_equals_a_fresh_search_after_takes_and_gives() -> None:
    topo = Topology.uniform(2, 4, 8, islands_per_node=2)
    pool = Pool(topo, range(topo.size))
    rng = random.Random(7)
    taken: list[frozenset[int]] = []
    for _ in range(400):
        k = rng.choice([1, 1, 1, 2, 4, 8, 12])
        got = pool.best(k)
        assert got == (pool._place_plain(k) if 0 < k <= pool.size else None)
        assert pool.best(k) is got  # memoised until the pool changes
        assert pool.place(k) == got
        if got is not None and rng.random() < 0.7:
            pool.take(got[0])
            taken.append(got[0])
        elif taken and rng.random() < 0.5:
            pool.give(taken.pop(rng.randrange(len(taken))))
        assert pool.size == len(pool.free_ids()) == sum(pool.node_free(n) for n in topo.nodes)


def test_take_checks_before_changing_anything() -> None:
    topo = Topology.uniform(1, 1, 4)
    pool = Pool(topo, range(4))
    pool.take({0})
    with pytest.raises(ValueError, match="not free or repeated"):
        pool.take([1, 0])
    with pytest.raises(ValueError, match="not free or repeated"):
        pool.take([2, 2])
    assert pool.free_ids() == {1, 2, 3} and pool.has({1, 2}) and not pool.has({0, 1})
    copy = pool.copy()
    copy.take_free(frozenset({1}))
    assert 1 in pool and 1 not in copy and pool.size == 3 and copy.size == 2
