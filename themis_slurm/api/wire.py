"""What a client of the status API shares with its server, in a module that imports nothing.

The `themis` CLI reads these (the default address, the GPU states of /v1/cluster) and daemon/config.py its
defaults for the server's limits; neither should have to import the server (http.server, the views and
through them much of the core) to learn a few constants: `themis status` runs in `watch` loops (#36).
"""

from __future__ import annotations

DEFAULT_LISTEN = "127.0.0.1:8787"
DEFAULT_WORKERS = 16  # threads that build and send responses
DEFAULT_BACKLOG = 256  # listen() backlog (the kernel caps it at net.core.somaxconn)
DEFAULT_TIMEOUT_S = 5.0  # for the whole request head, from accept()
DEFAULT_WRITE_TIMEOUT_S = 30.0  # for sending one response
DEFAULT_MAX_CONNECTIONS = 512  # open at once (reading, queued or being answered); stays under 1024 files

#: The states a GPU is counted in by /v1/cluster (its ``gpus`` totals and rack rows), in display order.
#: "starting": granted to a job Slurm has not started yet (not "reserved": that word is the core's, for GPUs
#: held idle for a wide gang, core/reservation.py)
GPU_STATES = ("free", "starting", "leased", "unmanaged", "unavailable")
