from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from themis_slurm.slurm.gres import (
    GpuRequest,
    GresItem,
    gpu_count,
    gpu_indices,
    parse_gres,
    parse_gres_item,
    parse_tres,
    split_top_level,
    tres_gpus,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu:a100:4(S:0-1)", (GresItem("gpu", "a100", 4, None, (0, 1)),)),
        ("gpu:a100:2(IDX:0-1,3)", (GresItem("gpu", "a100", 2, (0, 1, 3), None),)),
        ("gpu:0", (GresItem("gpu", None, 0),)),
        ("gpu", (GresItem("gpu", None, 1),)),
        ("gpu:a100", (GresItem("gpu", "a100", 1),)),
        ("gpu:a100:0(IDX:N/A)", (GresItem("gpu", "a100", 0, (), None),)),
        ("(null)", ()),
        ("", ()),
        (None, ()),
        ("gpu:a100:4(S:0-1),mps:400", (GresItem("gpu", "a100", 4, None, (0, 1)), GresItem("mps", None, 400))),
    ],
)
def test_parse_gres(text, expected):
    assert parse_gres(text) == expected


def test_gres_helpers():
    s = "gpu:a100:2(IDX:0,2),gpu:v100:1(IDX:5),mps:1K"
    assert split_top_level(s) == ["gpu:a100:2(IDX:0,2)", "gpu:v100:1(IDX:5)", "mps:1K"]
    assert gpu_count(s) == 3
    assert gpu_indices(s) == (0, 2, 5)
    assert parse_gres("mps:1K")[0].count == 1024


@pytest.mark.parametrize("bad", ["gpu:a100:x", "gpu:a:b:c:d", "gpu:2(IDX:0-", "gpu:2(FOO:1)", "gpu:2(IDX:a)"])
def test_bad_gres_names_the_string(bad):
    with pytest.raises(ValueError) as exc:
        parse_gres(bad)
    assert repr(bad) in str(exc.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gres:gpu:2", GpuRequest(2)),
        ("gres/gpu=4", GpuRequest(4)),
        ("gres:gpu:a100:2", GpuRequest(2, "a100")),
        ("gres/gpu:2", GpuRequest(2)),
        ("gres/gpu:a100:2", GpuRequest(2, "a100")),
        ("gpu:4", GpuRequest(4)),
        ("cpu=2,mem=1G,node=1,billing=2,gres/gpu=4,gres/gpu:a100=4", GpuRequest(4, "a100")),
        ("cpu=1,node=1,billing=1", GpuRequest(0)),
        ("gres:gpu:a100:1,gres:gpu:v100:2", GpuRequest(3, None)),
        ("gres:mps:100", GpuRequest(0)),
        ("", GpuRequest(0)),
        (None, GpuRequest(0)),
    ],
)
def test_tres_gpus(text, expected):
    assert tres_gpus(text) == expected


def test_parse_tres_dict_and_error():
    assert parse_tres("cpu=2,gres/gpu=4")["gres/gpu"] == "4"
    with pytest.raises(ValueError, match="cpu2"):
        parse_tres("cpu2")


@given(st.sets(st.integers(min_value=0, max_value=63), max_size=16), st.sampled_from([None, "a100", "h100"]))
def test_gres_index_round_trip(indices, gtype):
    item = GresItem("gpu", gtype, len(indices), tuple(sorted(indices)), None)
    assert parse_gres_item(item.render()) == item
