from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from themis_slurm.slurm import hostlist
from themis_slurm.slurm.ranges import fold_int_list, parse_int_list


def test_expand_ranges_and_padding():
    assert hostlist.expand("node[1-4,7]") == ["node1", "node2", "node3", "node4", "node7"]
    assert hostlist.expand("gpu[01-02]-ib") == ["gpu01-ib", "gpu02-ib"]
    assert hostlist.expand("node3,node1") == ["node1", "node3"]


@pytest.mark.parametrize("empty", ["", "(null)", "None", "N/A", "  "])
def test_expand_empty_values(empty):
    assert hostlist.expand(empty) == []


@pytest.mark.parametrize("bad", ["node[1-", "n[3-1]", "a b", "node[x-y]"])
def test_expand_bad_names_the_string(bad):
    with pytest.raises(ValueError, match="bad hostlist") as exc:
        hostlist.expand(bad)
    assert repr(bad) in str(exc.value)


def test_fold():
    assert hostlist.fold(["n1", "n2", "n4"]) == "n[1-2,4]"
    assert hostlist.fold([]) == ""
    with pytest.raises(ValueError, match="bad node name"):
        hostlist.fold(["ok", "no,comma"])


@given(st.lists(st.integers(min_value=0, max_value=300), max_size=40))
def test_hostlist_round_trip(nums):
    names = sorted({f"node{n}" for n in nums}, key=lambda s: int(s[4:]))
    assert hostlist.expand(hostlist.fold(names)) == names


def test_int_list():
    assert parse_int_list("0-2,5") == (0, 1, 2, 5)
    assert parse_int_list("[0-3]") == (0, 1, 2, 3)
    assert parse_int_list("") == ()
    assert fold_int_list([5, 0, 1, 2, 2]) == "0-2,5"
    for bad in ("1-", "a", "3-1", "-1"):
        with pytest.raises(ValueError, match=repr(bad).replace("[", r"\[")):
            parse_int_list(bad)


@given(st.sets(st.integers(min_value=0, max_value=200)))
def test_int_list_round_trip(values):
    assert parse_int_list(fold_int_list(values)) == tuple(sorted(values))
