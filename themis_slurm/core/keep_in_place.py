"""Placement fix-ups after the allocation: never spend a restart that buys nothing.

The auction and the leftover place gangs against the pool without knowing whose home a GPU is. Two phases
then undo restarts that change nothing: :func:`keep_holders_in_place` (a same-kind job of the same app
landing on a holder's GPUs gives them back to the holder: one renewal instead of two restarts) and
:func:`no_pointless_moves` (a holder keeps its GPUs when a swap with the gangs that landed there places
everybody as well). Both keep every app's GPU count, so payments and leftover accounting are untouched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from themis_slurm.core.agent import Gang
from themis_slurm.core.decision import GrantSource
from themis_slurm.core.gpu_types import gang_speed
from themis_slurm.core.placement import Pool, allowed_nodes_on, get_profile, throughput
from themis_slurm.core.round_state import RoundState
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import Job


def keep_in_place(rs: RoundState) -> None:
    """Keep-in-place phase: one renewal instead of two restarts, then no move that changes no placement."""
    rs.got = keep_holders_in_place(rs.got, rs.homes, rs.jobs, rs.source)
    rs.cut = {jid: t for jid, t in rs.cut.items() if jid in rs.source}
    rs.got = no_pointless_moves(rs.got, rs.homes, rs.jobs, rs.source, rs.state.topology, 1.0 - rs.restart_discount)


def keep_holders_in_place(
    got: dict[str, list[Gang]],
    homes: Mapping[str, frozenset[int]],
    jobs: Mapping[str, Job],
    source: dict[str, str],
) -> dict[str, list[Gang]]:
    """Never restart two jobs where one renewal does.

    When a job X of an app lands exactly on the GPUs of a lease holder Y of the same app and the same
    kind (shape and profile: same throughput, same rho; and allowed nodes: X may start wherever Y was
    placed), while Y is preempted or moved, give Y its GPUs back and X whatever Y got (or nothing: X keeps
    waiting). The app's allocation is unchanged.
    """
    out: dict[str, list[Gang]] = {}
    for aid, gangs in got.items():
        gangs = list(gangs)
        by_job = {g.job_id: k for k, g in enumerate(gangs)}
        for y, home in homes.items():
            if jobs[y].app_id != aid or (y in by_job and gangs[by_job[y]].gpus == home):
                continue
            for k, g in enumerate(gangs):
                x = g.job_id
                if g.gpus == home and x != y and x not in homes and jobs[x].kind == jobs[y].kind:
                    yk = by_job.get(y)
                    sx, sy = source[x], source.get(y)
                    gangs[k] = Gang(y, g.gpus, g.level, g.throughput)
                    source[y] = sx
                    if yk is not None:  # Y had been moved elsewhere: X takes that spot instead
                        old = gangs[yk]
                        gangs[yk] = Gang(x, old.gpus, old.level, old.throughput)
                        source[x] = sy or sx
                    else:  # Y had lost: X keeps waiting
                        source.pop(x, None)
                    by_job = {gg.job_id: i for i, gg in enumerate(gangs)}
                    break
        out[aid] = gangs
    return out


def no_pointless_moves(
    got: Mapping[str, list[Gang]],
    homes: Mapping[str, frozenset[int]],
    jobs: Mapping[str, Job],
    source: dict[str, str],
    topo: Topology,
    start_keep: float,
) -> dict[str, list[Gang]]:
    """Never spend a restart that changes no job's placement: a holder keeps its GPUs when a swap does as well.

    The auction and the leftover place gangs against the pool without knowing whose home a GPU is, so a
    bidder's gang can land on a lease holder Y's GPUs H (its best fit among equivalent spots) while Y, or a
    job X of Y's app and kind standing in for Y, is sent to other GPUs B of the same count: Y is
    preempted and restarted (or X started) for nothing when the two spots are equivalent. When the
    gangs on H lie inside H and cover it, and they can all be placed inside B (shape kept; a holder of B
    at its own home) at a placement factor no worse than on H for each of them, and Y's factor on H is no
    worse than on B, the gangs swap: Y renews on H, the gangs of H move to B, X (if it stood in) keeps
    waiting. Otherwise the move is kept, and then it is worth it: some job needs H (or Y needs B) for a
    better placement factor. The GPUs in use, each app's GPU count and gang count stay the same, so the
    idle GPUs, the hidden payments and the leftover accounting are untouched; the moved gangs get the
    throughput of their new placement (a renewal in place keeps it whole, a start counts `start_keep`),
    so rho_after reflects the final placements, and no app's throughput goes down.
    """
    swaps = _Swaps(got, homes, jobs, source, topo, start_keep)
    while swaps.swap_one():  # each swap puts one more holder at home and takes none away: this ends
        pass
    return swaps.out


class _Swaps:
    """One call of :func:`no_pointless_moves`: the gangs being fixed up (`out`, by app) and what a swap is
    judged by (the jobs, the holders' homes, the topology, the throughput a start keeps)."""

    __slots__ = ("homes", "jobs", "out", "source", "start_keep", "topo")

    def __init__(self, got: Mapping[str, list[Gang]], homes: Mapping[str, frozenset[int]], jobs: Mapping[str, Job],
                 source: dict[str, str], topo: Topology, start_keep: float) -> None:  # fmt: skip
        self.out = {aid: list(gs) for aid, gs in got.items()}
        self.homes, self.jobs, self.source, self.topo, self.start_keep = homes, jobs, source, topo, start_keep

    def factor(self, jid: str, gpus: frozenset[int]) -> float:
        """How fast `jid` runs per GPU on `gpus`: its placement factor there, x its speed on their type on a
        cluster of several types (a swap never moves a job to a slower type, nor to one it cannot run on)."""
        job = self.jobs[jid]
        f = get_profile(job.profile).factor(self.topo.level_of(gpus))
        return f * gang_speed(self.topo, job, gpus) if self.topo.heterogeneous else f

    def gang(self, jid: str, gpus: frozenset[int]) -> Gang:
        """`jid` on `gpus`, at the throughput of that placement (whole when it renews at home)."""
        lvl = self.topo.level_of(gpus)
        keep = 1.0 if self.homes.get(jid) == gpus else self.start_keep
        job = self.jobs[jid]
        speed = gang_speed(self.topo, job, gpus) if self.topo.heterogeneous else 1.0
        return Gang(jid, gpus, lvl, throughput(len(gpus), lvl, get_profile(job.profile)) * speed * keep)

    def swap_one(self) -> bool:
        """Make the first swap (holders in id order) that puts a holder back at home; False: there is none."""
        owner: dict[int, tuple[str, int]] = {}  # GPU -> (app, index of its gang in out[app])
        for aid, gs in self.out.items():
            for k, g in enumerate(gs):
                owner.update({gpu: (aid, k) for gpu in g.gpus})
        homes, jobs, out = self.homes, self.jobs, self.out
        for y in sorted(homes):
            home = homes[y]
            gs = out.get(jobs[y].app_id, [])
            mine = next((k for k, g in enumerate(gs) if g.job_id == y), None)
            if mine is not None and gs[mine].gpus == home:
                continue  # renewed in place already
            if any(g not in owner for g in home):
                continue  # part of H is idle or reserved: not a swap
            if self._swap_home(y, gs, mine, owner):
                return True
        return False

    def _swap_home(self, y: str, gs: list[Gang], mine: int | None, owner: Mapping[int, tuple[str, int]]) -> bool:
        """Put holder `y` back on its home H, all of it in use by others, by a swap with Y's gang `mine` (Y was
        moved) or, when Y lost, with a job of its app and kind standing in for it (:meth:`_swap`)."""
        if mine is not None:
            movers = [mine]
        else:
            kind = self.jobs[y].kind
            movers = [k for k, g in enumerate(gs) if g.job_id not in self.homes and self.jobs[g.job_id].kind == kind]
        return any(self._swap(y, gs, k, owner) for k in movers)

    def _swap(self, y: str, gs: list[Gang], k: int, owner: Mapping[int, tuple[str, int]]) -> bool:
        """Swap gang `k` of Y's app (Y, or X standing in for it), on B, with the gangs on Y's home H, when
        nobody is placed worse for it; False: the move stands (some job needs H, or Y needs B)."""
        home, m = self.homes[y], gs[k]
        b = m.gpus
        if len(b) != len(home) or b & home or self.source.get(m.job_id) is GrantSource.RESERVATION:
            return False
        if self.factor(y, home) < self.factor(y, b) - 1e-12:
            return False  # Y itself is better placed on B: a move worth its restart
        slots = sorted({owner[g] for g in home})
        occupants = [self.out[oa][ok] for oa, ok in slots]
        if any(not o.gpus <= home or self.source.get(o.job_id) is GrantSource.RESERVATION for o in occupants):
            return False
        placed = self._refit(occupants, b)
        if placed is None:
            return False  # some gang of H needs H for its placement: the move stands
        for oa, ok in slots:
            o = self.out[oa][ok]
            self.out[oa][ok] = self.gang(o.job_id, placed[o.job_id])
        gs[k] = self.gang(y, home)
        if m.job_id != y:  # X stood in for Y: Y takes its source, X keeps waiting
            self.source[y] = self.source.pop(m.job_id)
        return True

    def _refit(self, occupants: Sequence[Gang], b: frozenset[int]) -> dict[str, frozenset[int]] | None:
        """The occupants of H placed inside B, none at a worse factor (None: they do not all fit). An
        occupant moves to B like any start: on its allowed nodes (at its home, it renews: wherever that is)."""
        topo = self.topo
        sub = Pool(topo, b)
        placed: dict[str, frozenset[int]] = {}
        for o in sorted(occupants, key=lambda g: (-len(g.gpus), g.job_id)):
            job, home = self.jobs[o.job_id], self.homes.get(o.job_id)
            if home is not None and len(home) == len(o.gpus) and all(g in sub for g in home):
                gpus: frozenset[int] | None = home
            else:
                shaped = job.nodes is not None and len(o.gpus) == job.gpus
                shape = (job.gpus, job.gpus_per_node, job.nodes) if shaped else (len(o.gpus), None, None)
                among = allowed_nodes_on(topo, job.allowed_nodes)
                found = sub.place(*shape) if among is None else sub.place_among(*shape, among)
                gpus = found[0] if found is not None else None
            if gpus is None or self.factor(o.job_id, gpus) < self.factor(o.job_id, o.gpus) - 1e-12:
                return None
            sub.take(gpus)
            placed[o.job_id] = gpus
        return placed if sub.size == 0 else None
