"""A fake `Runner` and builders for 22.05-shaped squeue/sinfo JSON, for adapter unit tests."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from themis_slurm.slurm.runner import CallStats, SlurmCommandError, command_name

Answer = str | Exception | Callable[[list[str]], str]


class FakeRunner:
    """Answers commands by their leading words; records every argv; unknown commands fail loudly."""

    def __init__(self, answers: dict[tuple[str, ...], Answer] | None = None,
                 slurm_conf: str | None = None) -> None:
        self.answers: dict[tuple[str, ...], Answer] = dict(answers or {})
        self.calls: list[list[str]] = []
        self.timeouts: list[float | None] = []
        self.stops: list[str | None] = []
        self.stats = CallStats()
        if slurm_conf:
            self.slurm_conf = slurm_conf

    def run(self, argv: Sequence[str], timeout: float | None = None, stop_at: str | None = None) -> str:
        args = list(argv)
        self.calls.append(args)
        self.timeouts.append(timeout)
        self.stops.append(stop_at)
        match = max((k for k in self.answers if tuple(args[: len(k)]) == k), key=len, default=None)
        if match is None and args[:3] == ["scontrol", "show", "reservation"]:
            self.stats.add(command_name(args), 0.001, False)
            return "No reservations in the system\n"  # the fake cluster has none unless a test says so
        if match is None and args[:3] == ["scontrol", "show", "config"]:
            self.stats.add(command_name(args), 0.001, False)
            return "AccountingStorageEnforce = none\nClusterName = fake\n"  # no limits unless a test says so
        answer: Answer = self.answers[match] if match is not None else SlurmCommandError(
            args, 1, f"fake: no answer for {args}")
        if callable(answer) and not isinstance(answer, Exception):
            answer = answer(args)
        self.stats.add(command_name(args), 0.001, isinstance(answer, Exception))
        if isinstance(answer, Exception):
            raise answer
        return answer


def job(job_id: int, *, user: str = "alice", state: str = "PENDING", partition: str = "gpu",
        record: str | None = "themis:v1;app=;model=;sens=;est=", comment: str = "", gres: str = "gres:gpu:1",
        nodes: str = "", node_count: int = 1, gres_detail: Sequence[str] = (), array_job_id: int = 0,
        array_task_id: int | None = None, array_task_string: str = "", priority: int = 0,
        reason: str = "JobHeldUser", requeue: bool = True, restart_cnt: int = 0, required_nodes: str = "",
        tres_per_job: str = "", account: str = "") -> dict[str, Any]:
    """One v0.0.38 job object with the fields the parser reads."""
    return {
        "job_id": job_id, "array_job_id": array_job_id, "array_task_id": array_task_id,
        "array_task_string": array_task_string, "name": f"j{job_id}", "user_name": user, "user_id": 1000,
        "partition": partition, "job_state": state, "state_reason": reason if state == "PENDING" else "None",
        "priority": priority, "nodes": nodes, "node_count": node_count, "required_nodes": required_nodes,
        "excluded_nodes": "", "gres_detail": list(gres_detail), "tres_per_node": gres, "tres_per_job": tres_per_job,
        "tres_alloc_str": "", "tres_req_str": "", "time_limit": 60, "submit_time": 1000, "start_time": 0,
        "end_time": 0, "comment": comment, "admin_comment": record or "", "restart_cnt": restart_cnt,
        "requeue": requeue, "batch_flag": True, "account": account,
    }


def node(name: str, *, state: str = "idle", flags: Sequence[str] = (), used: str = "gpu:a100:0(IDX:N/A)",
         partitions: Sequence[str] = ("gpu", "debug"), gres: str = "gpu:a100:4(S:0-1)") -> dict[str, Any]:
    return {"name": name, "state": state, "state_flags": list(flags), "gres": gres, "gres_used": used,
            "partitions": list(partitions), "reason": "", "cpus": 16}


def squeue(*jobs: dict[str, Any]) -> str:
    return json.dumps({"meta": {}, "errors": [], "jobs": list(jobs)})


def sinfo(*nodes: dict[str, Any]) -> str:
    return json.dumps({"meta": {}, "errors": [], "nodes": list(nodes)})


GRES_CONF = """AutoDetect=off
NodeName=node[1-4] Name=gpu Type=a100 File=/dev/nvidia0 Links=-1,2,0,0
NodeName=node[1-4] Name=gpu Type=a100 File=/dev/nvidia1 Links=2,-1,0,0
NodeName=node[1-4] Name=gpu Type=a100 File=/dev/nvidia2 Links=0,0,-1,2
NodeName=node[1-4] Name=gpu Type=a100 File=/dev/nvidia3 Links=0,0,2,-1
"""
TOPOLOGY_CONF = """SwitchName=rack1 Nodes=node[1-2]
SwitchName=rack2 Nodes=node[3-4]
SwitchName=spine Switches=rack[1-2]
"""


def conf_dir(tmp: Path, gres: str | None = GRES_CONF, topology: str | None = TOPOLOGY_CONF) -> Path:
    """A folder with slurm.conf (content irrelevant), gres.conf and topology.conf; returns slurm.conf."""
    (tmp / "slurm.conf").write_text("ClusterName=fake\n")
    if gres is not None:
        (tmp / "gres.conf").write_text(gres)
    if topology is not None:
        (tmp / "topology.conf").write_text(topology)
    return tmp / "slurm.conf"
