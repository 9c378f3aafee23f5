"""themisd's read-only status API (HTTP + JSON) and the views the `themis` CLI shows.

Entry point for the daemon: :func:`start_api_server`. See server.py for routes, views.py for the documents
and the privacy rules, auth.py for munge identities, wire.py for what clients share with the server.

The names below are imported from server.py on first use (PEP 562), not when the package is: the CLI
imports ``api.auth`` and ``api.wire`` for every `themis status` and must not pay for the server and its
views (#36 item 2).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from themis_slurm.api.server import DEFAULT_LISTEN, ApiServer, build_app, start_api_server

__all__ = ["DEFAULT_LISTEN", "ApiServer", "build_app", "start_api_server"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("themis_slurm.api.server"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
