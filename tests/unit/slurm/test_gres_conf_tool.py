from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from themis_slurm.cli.gres_conf import compare_gpus, gres_conf
from themis_slurm.hw.nvml import (
    NvmlUnavailable,
    PynvmlBackend,
    affinity_words_to_cpus,
    linux_core_map,
    normalise_bus_id,
    probe_gpus,
    short_type,
)
from themis_slurm.slurm.gres_conf import islands, parse_gres_conf

from .fake_nvml import dgx_a100, pcie_a6000


def ht_fold(cpu: int) -> int:
    return cpu % 128  # DGX fake: CPU n and n+128 are hyperthread siblings of core n


def run(args, nvml=None, raises=None, core_of_cpu=None):
    def factory():
        if raises is not None:
            raise raises
        return nvml

    obj = {"nvml_factory": factory}
    if core_of_cpu is not None:
        obj["core_of_cpu"] = core_of_cpu
    return CliRunner().invoke(gres_conf, args, obj=obj)


def test_probe_dgx_nvswitch_full_mesh():
    gpus = probe_gpus(dgx_a100(), "dgx01", ht_fold)
    assert len(gpus) == 8
    assert {g.type for g in gpus} == {"a100"}
    assert [g.file for g in gpus] == [f"/dev/nvidia{i}" for i in range(8)]
    assert gpus[0].cores == tuple(range(64)) and gpus[7].cores == tuple(range(64, 128))
    assert gpus[3].links == (12, 12, 12, -1, 12, 12, 12, 12)
    assert islands(gpus) == (frozenset(range(8)),)


def test_probe_pcie_bridge_pair_follows_minor_order():
    gpus = probe_gpus(pcie_a6000(), "ws1")
    assert [g.file for g in gpus] == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"]
    assert [g.links for g in gpus] == [(-1, 4, 0, 0), (4, -1, 0, 0), (0, 0, -1, 0), (0, 0, 0, -1)]
    assert gpus[2].cores == tuple(range(16, 32)) and gpus[0].type == "a6000"
    assert islands(gpus) == (frozenset({0, 1}), frozenset({2, 3}))


def test_tool_prints_gres_conf_lines():
    res = run(["--node", "dgx01"], dgx_a100(), core_of_cpu=ht_fold)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("# gres.conf lines for dgx01") and len(lines) == 9
    assert lines[1] == ("NodeName=dgx01 Name=gpu Type=a100 File=/dev/nvidia0 Cores=0-63 "
                        "Links=-1,12,12,12,12,12,12,12")
    assert parse_gres_conf(res.stdout).gpus_on("dgx01") == probe_gpus(dgx_a100(), "dgx01", ht_fold)


def test_tool_closes_backend():
    nvml = pcie_a6000()
    assert run(["--node", "ws1"], nvml).exit_code == 0
    assert nvml.closed


def test_check_equal_exit_0(tmp_path: Path):
    out = run(["--node", "ws1"], pcie_a6000()).stdout
    conf = tmp_path / "gres.conf"
    conf.write_text("AutoDetect=off\nNodeName=other Name=gpu File=/dev/nvidia0\n" + out)
    res = run(["--node", "ws1", "--check", str(conf)], pcie_a6000())
    assert res.exit_code == 0, res.output
    assert "4 GPUs match" in res.stdout


def test_check_autodetect_style_nvswitch_conf_differs_exit_1(tmp_path: Path):
    # What Slurm's AutoDetect=nvml effectively sees on NVSwitch boxes: no links between GPUs.
    text = "".join(f"NodeName=dgx01 Name=gpu Type=A100 File=/dev/nvidia{i} Cores={0 if i < 4 else 64}-"
                   f"{63 if i < 4 else 127}\n" for i in range(8))
    conf = tmp_path / "gres.conf"
    conf.write_text(text)
    res = run(["--node", "dgx01", "--check", str(conf)], dgx_a100(), core_of_cpu=ht_fold)
    assert res.exit_code == 1
    assert res.stdout.count("Links=(none), hardware has -1,12") == 1  # gpu 0
    assert len(res.stdout.splitlines()) == 8  # one Links difference per GPU, Type compared case-insensitively
    assert "8 difference(s)" in res.stderr


def test_check_reports_count_file_and_cores(tmp_path: Path):
    conf = tmp_path / "gres.conf"
    conf.write_text("NodeName=ws1 Name=gpu Type=a6000 File=/dev/nvidia[0-1] Cores=0-7\n")
    res = run(["--node", "ws1", "--check", str(conf)], pcie_a6000())
    assert res.exit_code == 1
    out = res.stdout
    assert "2 GPUs configured, hardware has 4" in out
    assert "gpu 0: Cores=0-7, hardware has 0-15" in out
    assert "gpu 0: Links=(none), hardware has -1,4,0,0" in out
    assert "missing line: NodeName=ws1 Name=gpu Type=a6000 File=/dev/nvidia3 Cores=16-31 Links=0,0,0,-1" in out


def test_check_bad_or_missing_file_exit_2(tmp_path: Path):
    conf = tmp_path / "gres.conf"
    conf.write_text("NodeName=ws1 Name=gpu File=/dev/nvidia[0-\n")
    res = run(["--node", "ws1", "--check", str(conf)], pcie_a6000())
    assert res.exit_code == 2
    assert f"{conf}:1: File='/dev/nvidia[0-'" in res.stderr
    res = run(["--node", "ws1", "--check", str(tmp_path / "nope.conf")], pcie_a6000())
    assert res.exit_code == 2 and "cannot read" in res.stderr


def test_no_driver_exit_2():
    res = run(["--node", "x"], raises=NvmlUnavailable("NVML init failed: Driver Not Loaded"))
    assert res.exit_code == 2
    assert res.stdout == ""
    assert res.stderr == "themis gres-conf: error: cannot query GPUs: NVML init failed: Driver Not Loaded\n"


def test_real_pynvml_without_driver_is_unavailable():
    pytest.importorskip("pynvml")
    try:
        backend = PynvmlBackend()
    except NvmlUnavailable as exc:
        assert "NVML" in str(exc) or "pynvml" in str(exc)
    else:  # a machine with a real GPU: just make sure the probe runs
        with backend:
            assert all(g.file for g in probe_gpus(backend, "here"))


def test_compare_equal_is_empty():
    gpus = probe_gpus(pcie_a6000(), "ws1")
    assert compare_gpus(gpus, gpus, "x") == []


@pytest.mark.parametrize(
    ("name", "short"),
    [("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA H100 80GB HBM3", "h100"), ("Tesla V100-SXM2-32GB", "v100"),
     ("NVIDIA GeForce RTX 3090", "rtx3090"), ("NVIDIA RTX A6000", "a6000"), ("NVIDIA L40S", "l40s"),
     ("Quadro RTX 8000", "rtx8000"), ("NVIDIA", "gpu")],
)
def test_short_type(name, short):
    assert short_type(name) == short


def test_bus_ids_and_affinity_words(tmp_path: Path):
    assert normalise_bus_id(b"00000000:B1:00.0\x00") == "0000:b1:00.0"
    assert normalise_bus_id("0000:b1:00.0") == "0000:b1:00.0"
    assert affinity_words_to_cpus([0b101, 1 << 63]) == [0, 2, 127]
    # sysfs: 2 packages x 2 cores x 2 threads, core ids not contiguous
    layout = {0: (0, 0), 1: (0, 4), 2: (1, 0), 3: (1, 4), 4: (0, 0), 5: (0, 4), 6: (1, 0), 7: (1, 4)}
    for cpu, (pkg, core) in layout.items():
        topo = tmp_path / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{pkg}\n")
        (topo / "core_id").write_text(f"{core}\n")
    (tmp_path / "cpufreq").mkdir()
    assert linux_core_map(tmp_path) == {0: 0, 1: 1, 2: 2, 3: 3, 4: 0, 5: 1, 6: 2, 7: 3}
