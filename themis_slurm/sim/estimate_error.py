"""Estimate errors the simulator injects: what policies believe a job's work to be, versus what it really is.

Not to be confused with the daemon's work estimates of real Slurm jobs, nor with the API's finish-time
(T_id, T_sh) estimates: this module only models how wrong the estimates a simulated policy sees are.

The daemon only ever knows estimates (users' time limits, or a model's prediction), so the simulator keeps two
numbers per job: the TRUE work that drives progress and completion, and the ESTIMATE that policies see as
``Job.work``. An :class:`EstimateError` draws the ratio estimate / true per job, deterministically for a seed:

* ``none`` -- estimates are exact (factor 1).
* ``uniform:a:b`` -- factor ~ U(a, b); ``uniform:1:3`` models users' time limits that overshoot by up to 3x.
* ``lognormal:sigma`` -- factor = exp(N(0, sigma^2)): unbiased in log space, errors both ways.

When a job outlives its estimate (possible whenever the factor can be < 1) the policy would see zero remaining
work and could treat the job as finished; the simulator then bumps the estimate to ``done x BUMP_FACTOR``
(:func:`bumped`), the way a scheduler extends a job that is still running, so rho stays finite and meaningful.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

KINDS = ("none", "uniform", "lognormal")
BUMP_FACTOR = 1.1  # estimate := done x 1.1 when a job has done all it was believed to need


@dataclass(frozen=True)
class EstimateError:
    """Ratio estimate / true work per job: ``none``, ``uniform`` U(low, high), or ``lognormal`` (sigma)."""

    kind: str = "none"
    low: float = 1.0
    high: float = 1.0
    sigma: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"estimate error kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind == "uniform" and not (0 < self.low <= self.high and math.isfinite(self.high)):
            raise ValueError(f"uniform estimate error needs 0 < a <= b, got a={self.low}, b={self.high}")
        if self.kind == "lognormal" and not (self.sigma >= 0 and math.isfinite(self.sigma)):
            raise ValueError(f"lognormal estimate error needs sigma >= 0, got {self.sigma}")

    @classmethod
    def parse(cls, spec: str) -> EstimateError:
        """Read ``none``, ``uniform:A:B`` or ``lognormal:SIGMA`` (ValueError naming the spec otherwise)."""
        parts = spec.strip().lower().split(":")
        try:
            if parts == ["none"]:
                return cls()
            if parts[0] == "uniform" and len(parts) == 3:
                return cls("uniform", low=float(parts[1]), high=float(parts[2]))
            if parts[0] == "lognormal" and len(parts) == 2:
                return cls("lognormal", sigma=float(parts[1]))
        except ValueError as exc:
            raise ValueError(f"bad estimate error {spec!r}: {exc}") from None
        raise ValueError(f"bad estimate error {spec!r}; use none, uniform:A:B or lognormal:SIGMA")

    def __str__(self) -> str:
        if self.kind == "uniform":
            return f"uniform:{self.low:g}:{self.high:g}"
        if self.kind == "lognormal":
            return f"lognormal:{self.sigma:g}"
        return "none"

    def factors(self, n: int, seed: int) -> np.ndarray:
        """n ratios estimate / true, one per job in trace order; the same seed gives the same ratios."""
        if self.kind == "none":
            return np.ones(n)
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0xE57]))
        if self.kind == "uniform":
            return rng.uniform(self.low, self.high, n)
        return np.exp(rng.normal(0.0, self.sigma, n))


def bumped(estimate: float, done: float) -> float:
    """The estimate a policy should see for a job that has done `done`: raised when the job outlived it."""
    return done * BUMP_FACTOR if done >= estimate else estimate
