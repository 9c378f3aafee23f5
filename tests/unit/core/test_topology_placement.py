"""Topology levels and gang placement in the free-GPU pool."""

from __future__ import annotations

import pytest

from themis_slurm.core.placement import PROFILES, Pool, Profile, get_profile, throughput
from themis_slurm.core.topology import Level, Topology


@pytest.fixture
def topo() -> Topology:
    # 2 racks x 2 nodes x 4 GPUs, 2 NVLink islands of 2 per node
    return Topology.uniform(2, 2, 4, islands_per_node=2)


def test_uniform_shape(topo: Topology) -> None:
    assert topo.size == 16
    assert topo.racks == ("rack1", "rack2")
    assert topo.nodes == ("node1", "node2", "node3", "node4")
    assert topo.node_islands["node1"] == (0, 1)
    assert topo.gpu_id("node3", 2) == 10


def test_levels(topo: Topology) -> None:
    assert topo.level_of([0]) == Level.ISLAND
    assert topo.level_of([0, 1]) == Level.ISLAND
    assert topo.level_of([0, 2]) == Level.NODE
    assert topo.level_of([0, 4]) == Level.RACK
    assert topo.level_of([0, 8]) == Level.CLUSTER
    assert topo.nodes_of([0, 1, 5]) == {"node1": 2, "node2": 1}


def test_best_level(topo: Topology) -> None:
    assert topo.best_level(2) == Level.ISLAND
    assert topo.best_level(4) == Level.NODE
    assert topo.best_level(8) == Level.RACK
    assert topo.best_level(12) == Level.CLUSTER
    assert topo.best_level(8, 4, 2) == Level.RACK
    assert topo.best_level(12, 4, 3) == Level.CLUSTER


def test_from_spec_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="GPU index 0 twice"):
        Topology.from_spec({"r": {"n1": [[0], [0]]}})
    with pytest.raises(ValueError, match="two racks"):
        Topology.from_spec({"r1": {"n1": [[0]]}, "r2": {"n1": [[1]]}})
    with pytest.raises(ValueError, match="not divisible"):
        Topology.uniform(1, 1, 3, 2)


def test_profiles_from_paper() -> None:
    vgg = get_profile("VGG16")
    assert vgg.factors == (1.0, 1.0, 0.72, 0.52)
    assert vgg.sensitive and not get_profile("resnet50").sensitive
    assert throughput(4, Level.RACK, vgg) == pytest.approx(2.88)
    with pytest.raises(ValueError, match="unknown placement profile 'bert'"):
        get_profile("bert")
    with pytest.raises(ValueError, match="must not grow"):
        Profile("x", (0.5, 1.0, 1.0, 1.0))
    assert set(PROFILES) >= {"high", "medium", "low", "none"}


def test_find_is_tightest_and_best_fit(topo: Topology) -> None:
    pool = Pool(topo, range(16))
    pool.take([0])  # island 0 (node1) has 1 free now
    one = pool.find(1)
    assert one == frozenset({1}), "best fit: the island with the fewest free GPUs that still fits"
    two = pool.find(2)
    assert two is not None and topo.level_of(two) == Level.ISLAND and 1 not in two
    four = pool.find(4)
    assert four is not None and topo.level_of(four) == Level.NODE
    assert topo.nodes_of(four) != {"node1": 4}  # node1 has only 3 free
    eight = pool.find(8)
    assert eight is not None and topo.level_of(eight) == Level.RACK
    assert pool.find(16) is None
    assert pool.find(15) is not None and topo.level_of(pool.find(15)) == Level.CLUSTER


def test_find_shaped_and_within(topo: Topology) -> None:
    pool = Pool(topo, range(16))
    pool.take([4])  # node2 has 3 free
    g = pool.find(8, gpus_per_node=4, nodes=2)
    assert g is not None and topo.nodes_of(g) == {"node3": 4, "node4": 4}
    g = pool.find(6, gpus_per_node=3, nodes=2)
    assert g is not None and topo.level_of(g) == Level.RACK
    assert len(topo.nodes_of(g)) == 2 and all(v == 3 for v in topo.nodes_of(g).values())
    assert pool.find(2, within=["node2"]) is not None
    assert pool.find(4, within=["node2"]) is None
    g = pool.find(12, gpus_per_node=4, nodes=3)
    assert g is not None and topo.level_of(g) == Level.CLUSTER and "node2" not in topo.nodes_of(g)
    assert pool.find(16, gpus_per_node=4, nodes=4) is None


def test_take_give_errors_leave_pool_intact(topo: Topology) -> None:
    pool = Pool(topo, range(4))
    with pytest.raises(ValueError, match="not free or repeated"):
        pool.take([0, 5])
    assert pool.size == 4 and 0 in pool
    with pytest.raises(ValueError, match="already free"):
        pool.give([1])
    pool.take([0, 1])
    assert pool.size == 2 and pool.free_ids() == frozenset({2, 3})
