"""The reference README's per-job rho (sim/job_rho.py), computed by hand on small runs."""

from __future__ import annotations

import pytest

from themis_slurm.sim.job_rho import JobTimes, job_rhos, job_t_ids, rhos_on, summarise


def test_hand_computed_rhos() -> None:
    """2 GPUs. A (2 GPUs, 100 s alone) runs [0, 200); B (2 GPUs, 50 s alone) is there [100, 150).
    N = 1 on [0, 100), 2 on [100, 150), 1 on [150, 200). A: Nbar = (100 + 100 + 50) / 200 = 1.25,
    T_id = 100 x max(1, 2 x 1.25 / 2) = 125, rho = 200 / 125 = 1.6. B: Nbar = 2, T_id = 50 x 2, rho 0.5."""
    runs = [JobTimes(0.0, 200.0, 2, 100.0), JobTimes(100.0, 150.0, 2, 50.0)]
    assert job_rhos(runs, 2) == pytest.approx([1.6, 0.5])


def test_a_narrow_job_is_measured_against_its_own_gpus() -> None:
    """With N x g below the cluster the ideal is the job's run alone: rho = JCT / run time alone; a job
    that finishes the instant it arrives has rho 0 and does not break the average."""
    runs = [JobTimes(10.0, 130.0, 1, 100.0), JobTimes(20.0, 20.0, 1, 5.0)]
    assert job_rhos(runs, 32) == pytest.approx([1.2, 0.0])


def test_one_yardstick_for_two_runs() -> None:
    """The same two jobs run one after the other (A [0, 200), B [100, 300): the hand-computed run above
    stretched) and side by side ([0, 100) and [100, 150) as above). A finishes at 200 in both; measured on
    its own T_id the slower run looks as fair, measured on the other's it does not: rhos_on divides each
    job's time by the yardstick run's T_id."""
    fast = [JobTimes(0.0, 200.0, 2, 100.0), JobTimes(100.0, 150.0, 2, 50.0)]
    slow = [JobTimes(0.0, 200.0, 2, 100.0), JobTimes(100.0, 300.0, 2, 50.0)]
    assert job_t_ids(fast, 2) == pytest.approx([125.0, 100.0])
    # slow: N = 1 on [0, 100), 2 on [100, 200), 1 on [200, 300): A's Nbar 1.5 (T_id 150), B's 1.5 (T_id 75)
    assert job_t_ids(slow, 2) == pytest.approx([150.0, 75.0])
    assert rhos_on(slow, fast, 2) == pytest.approx([200 / 125, 200 / 100])
    assert rhos_on(fast, fast, 2) == pytest.approx(job_rhos(fast, 2))
    with pytest.raises(ValueError, match="runs of different jobs: 1 against 2"):
        rhos_on(fast[:1], fast, 2)


def test_summary() -> None:
    runs = [JobTimes(0.0, 100.0 * k, 1, 100.0) for k in (1, 1, 1.04, 1.06, 2)]
    s = summarise(runs, 32)
    assert s.max_rho == pytest.approx(2.0) and s.median_rho == pytest.approx(1.04)
    assert s.share_above == pytest.approx(2 / 5) and s.mean_jct_s == pytest.approx(122.0) and s.n_jobs == 5


@pytest.mark.parametrize(
    ("job", "message"),
    [
        (JobTimes(10.0, 5.0, 1, 1.0), "job 0: finish 5.0 is not a finite time at or after arrival 10.0"),
        (JobTimes(0.0, 5.0, 0, 1.0), "job 0: gpus must be > 0, got 0"),
        (JobTimes(0.0, 5.0, 1, 0.0), "job 0: run_alone must be finite and > 0, got 0.0"),
    ],
)
def test_bad_runs_are_refused_naming_the_job_and_field(job: JobTimes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        job_rhos([job], 32)
    with pytest.raises(ValueError, match="cluster_gpus must be > 0"):
        job_rhos([], 0)
