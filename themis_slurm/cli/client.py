"""How the `themis` CLI reaches themisd's data: the HTTP API, or the state database on the controller.

Where: ``--url``, else ``api.listen`` of the config file (``--config``, default /etc/themis/themis.yaml;
missing is fine on a login node: the default address is used), else http://127.0.0.1:8787. Each request
carries a fresh munge credential (``munge -n``; munged refuses replays, so one per request), so the API
can apply PrivateData the Slurm way.

When the API is not reachable and no ``--url`` was given, but the state database of the config is
readable (we are on the controller), the same views are built in-process from the file opened read-only
plus one Slurm snapshot, and every document says ``source: database`` and how old the data is. Otherwise
the error is one line naming the address, why it did not answer (refused, no answer within the timeout,
...), and why the database could not stand in (not readable by this user: which group to join; locked;
damaged); a database that does not exist (a login node) is not mentioned.

The config file is read by themisd's own loader (``daemon.config.load_for_client``: the same checks and
defaults), except that keys this version does not know are ignored: a client must keep working against a
daemon config that has keys it does not know yet; ``themis config check`` is the strict validator.

Imports: a query over HTTP needs this module, the munge helpers (api.auth) and slurm.conf's munge socket
(api.slurmconf); the config loader is imported only when there is a config file, and the views, the state
database and the lease terms only when the database stands in for the API. `themis status` runs in
`watch` loops: tests/unit/cli/test_imports.py keeps the rest out (#36 item 2).
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from themis_slurm.api.auth import AUTH_SCHEME, AuthError, encode_credential
from themis_slurm.api.slurmconf import read_slurm_conf
from themis_slurm.api.wire import DEFAULT_LISTEN

if TYPE_CHECKING:
    from themis_slurm.daemon.config import Config
    from themis_slurm.state.round_input import RoundTerms

DEFAULT_CONFIG = Path("/etc/themis/themis.yaml")  # daemon.config.DEFAULT_PATH (a test checks they agree)
TIMEOUT_S = 10.0
CHECK_SERVICE = "is the service running? (systemctl status themisd)"


class CliError(RuntimeError):
    """An error to print as ``themis: error: <message>`` with exit status 1."""


@dataclass(frozen=True)
class Settings:
    """Where to find themisd's data, from the options and the config file."""

    url: str
    url_given: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: the whole file, as themisd reads it; None: no file here (a login node), themisd's defaults apply
    file_config: Config | None = None

    @property
    def config(self) -> Config:
        if self.file_config is not None:
            return self.file_config
        from themis_slurm.daemon.config import Config  # only where a default is asked for (the database path)

        return Config()

    @property
    def db_path(self) -> Path:
        return self.config.db_path

    @property
    def slurm_conf(self) -> str | None:
        """slurm.conf as the config names it; None: Slurm's own default ($SLURM_CONF or /etc/slurm)."""
        if self.file_config is None:
            return None
        return self.file_config.slurm.slurm_conf or None

    @property
    def partitions(self) -> tuple[str, ...]:
        return self.config.slurm.partitions

    def round_terms(self) -> RoundTerms:
        """The lease terms of this config, from which the API views make each app's T_id and T_sh."""
        return self.config.round_terms


def _url_of(listen: str) -> str:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def load_settings(config: Path | None, url: str | None) -> Settings:
    """Settings from --config/--url, through themisd's own loader (daemon/config.py: same YAML, checks and
    defaults). An explicit --config that cannot be used is an error; the default file may be absent."""
    path = config or Path(os.environ.get("THEMISD_CONFIG", DEFAULT_CONFIG))
    cfg: Config | None = None
    notes: list[str] = []
    if not _present(path):
        if config is not None:
            raise CliError(f"config file {path} does not exist (give the right --config, or --url)")
        # a login node without the daemon's file: the defaults
    else:
        from themis_slurm.daemon.config import ConfigError, load_for_client

        try:
            cfg, ignored = load_for_client(path)
            notes += ignored
        except ConfigError as e:
            if config is not None:
                raise CliError(str(e)) from None
            notes.append(f"ignored {e}")
    # the API off in the file (listen ""): still try the default address
    listen = (cfg.api.listen if cfg is not None else "") or DEFAULT_LISTEN
    return Settings(url=(url or _url_of(listen)).rstrip("/"), url_given=url is not None, notes=tuple(notes),
                    file_config=cfg)


def _present(path: Path) -> bool:
    """Whether `path` exists; one this user may not even look at counts (reading it then says why)."""
    try:
        path.stat()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


def credential_header(slurm_conf: str | None) -> tuple[str | None, str]:
    """(Authorization header value, "") or (None, why no credential could be made)."""
    socket = read_slurm_conf(slurm_conf).munge_socket
    try:
        return f"{AUTH_SCHEME} {encode_credential(socket)}", ""
    except AuthError as e:
        return None, str(e)


class Client:
    """Fetches API documents (dicts) over HTTP, or builds them from the database on the controller."""

    def __init__(self, settings: Settings, timeout: float = TIMEOUT_S) -> None:
        self.s = settings
        self.timeout = timeout
        self.auth_note = ""

    def get(self, path: str, params: Mapping[str, str | None] | None = None) -> dict[str, Any]:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            return self._http(path, query)
        except _Unreachable as e:
            why = str(e)
        if self.s.url_given:
            raise CliError(f"themisd not reachable at {self.s.url} ({why}): {CHECK_SERVICE}")
        return self._local(path, query, why)

    def _http(self, path: str, query: Mapping[str, str]) -> dict[str, Any]:
        url = f"{self.s.url}{path}" + (f"?{urlencode(query)}" if query else "")
        header, why = credential_header(self.s.slurm_conf)
        self.auth_note = why
        req = urllib.request.Request(url, headers={"Accept": "application/json", **(
            {"Authorization": header} if header else {})})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as res:
                return json.loads(res.read())
        except urllib.error.HTTPError as e:
            raise CliError(_error_text(e)) from None
        except (OSError, http.client.HTTPException) as e:  # URLError, refused, reset, timed out, cut short
            raise _Unreachable(no_answer(e, self.timeout)) from None
        except json.JSONDecodeError:
            raise CliError(f"{url} did not answer with JSON: is {self.s.url} themisd's API?") from None

    def _local(self, path: str, query: Mapping[str, str], why: str) -> dict[str, Any]:
        """The views in-process over the database (read-only) and one Slurm snapshot; when the database
        cannot stand in for the API either, one error naming both."""
        from themis_slurm.api import views
        from themis_slurm.api.auth import local_identity
        from themis_slurm.api.cluster import CachedSnapshot
        from themis_slurm.state.errors import StateMissing, StateUnavailable
        from themis_slurm.state.reader import StateReader, connect_ro

        try:
            db = connect_ro(self.s.db_path)
        except StateMissing:  # not the controller: the API is the only way, no need to talk of files
            raise CliError(f"themisd not reachable at {self.s.url} ({why}): {CHECK_SERVICE}") from None
        except StateUnavailable as e:
            raise CliError(f"themisd not reachable at {self.s.url} ({why}), and {e}: {CHECK_SERVICE}") from None
        conf = read_slurm_conf(self.s.slurm_conf)
        snap_source = CachedSnapshot(self.s.partitions, self.s.slurm_conf, ttl_s=0.0)
        snap = snap_source()
        viewer = views.make_viewer(local_identity((conf.slurm_user or "slurm",)), "", conf)
        with StateReader(db, str(self.s.db_path)) as state:
            ctx = views.Context(state, snap, viewer, conf, source="database", snapshot_error=snap_source.error,
                                round_terms=self.s.round_terms(),
                                warnings=[f"themisd not reachable at {self.s.url} ({why}): read "
                                          f"{self.s.db_path} directly"])
            view = views.route(path)
            if view is None:
                raise CliError(f"no such endpoint {path}")
            try:
                return view(ctx, dict(query))
            except (views.BadRequest, views.NotFound, views.Unavailable, StateUnavailable) as e:
                raise CliError(str(e)) from None


class _Unreachable(Exception):
    pass


def no_answer(e: BaseException, timeout: float) -> str:
    """Why the API did not answer, in a few words (a timeout says how long the CLI waited)."""
    reason = e.reason if isinstance(e, urllib.error.URLError) else e
    if isinstance(reason, TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    if isinstance(reason, http.client.HTTPException) and not isinstance(reason, OSError):
        return f"not an HTTP answer: {type(reason).__name__} {str(reason)[:60]!r}"
    return str(reason) or type(reason).__name__


def _error_text(e: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(e.read())
        return str(body.get("error") or body)
    except (ValueError, AttributeError):
        return f"HTTP {e.code} {e.reason} from {e.url}"


def explain_path(job_id: str) -> str:
    return f"/v1/jobs/{quote(job_id, safe='')}/explain"
