"""A job's Themis intent: where it is in its life under Themis, stored in the ``jobs`` table.

waiting (held, wants GPUs) -> granted (a round gave it GPUs; start pending until they are free) -> starting
(pin + release sent) -> running (lease) -> warning (SIGUSR1 to send) -> warned (grace running) ->
requeueing (requeuehold sent) -> waiting. `running` without a Themis start is an adopted job.

The values are the strings stored in the database (a str enum: rows written by older themisd read the same).
The named subsets below are the only spelling of each group, so the round, the reconciler, the metrics and
the API cannot disagree on which jobs belong to one.
"""

from __future__ import annotations

from enum import StrEnum


class Intent(StrEnum):
    WAITING = "waiting"
    GRANTED = "granted"
    STARTING = "starting"
    RUNNING = "running"
    WARNING = "warning"
    WARNED = "warned"
    REQUEUEING = "requeueing"


#: A round gave the job GPUs that Slurm does not run it on yet: they are held for it (state.held), never
#: offered again, and count towards its user's limits as if it ran.
HELD_FOR_GRANTED = frozenset({Intent.GRANTED, Intent.STARTING})
#: The job lost its lease and is being warned and requeued; a row that plans GPUs is moving there.
MOVING = frozenset({Intent.WARNING, Intent.WARNED, Intent.REQUEUEING})
#: Between waiting and running: granted or moving. Its row's planned GPUs are Themis's, whatever Slurm shows.
TRANSITIONAL = HELD_FOR_GRANTED | MOVING
