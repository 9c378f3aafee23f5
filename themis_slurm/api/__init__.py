"""themisd's read-only status API (HTTP + JSON) and the views the `themis` CLI shows.

Entry point for the daemon: :func:`start_api_server`. See server.py for routes, views.py for the documents
and the privacy rules, auth.py for munge identities.
"""

from themis_slurm.api.server import DEFAULT_LISTEN, ApiServer, build_app, start_api_server

__all__ = ["DEFAULT_LISTEN", "ApiServer", "build_app", "start_api_server"]
