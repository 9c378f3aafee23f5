"""munge identities and the slurm.conf settings the API reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from themis_slurm.api.auth import Authenticator, AuthError, parse_unmunge
from themis_slurm.api.slurmconf import parse_slurm_conf, read_slurm_conf

from . import world


def test_parse_unmunge_numeric_metadata() -> None:
    assert parse_unmunge("STATUS:          0\nUID:             1001\n") == 1001
    assert parse_unmunge("STATUS: Success (0)\nUID: themis-alice (1001)\n") == 1001


def test_parse_unmunge_refusals() -> None:
    with pytest.raises(AuthError, match="Replayed"):
        parse_unmunge("STATUS: Replayed credential (15)\nUID: 1001\n")
    with pytest.raises(AuthError, match="without a UID"):
        parse_unmunge("STATUS: 0\n")


def test_authenticator() -> None:
    auth = Authenticator(world.fake_decoder, privileged=("slurm",), names=world.names)
    ident, why = auth.identify("MUNGE cred-alice")
    assert ident is not None and (ident.uid, ident.user, ident.privileged) == (1001, "themis-alice", False)
    assert why == ""
    assert auth.identify("munge cred-root")[0].privileged  # type: ignore[union-attr]
    assert auth.identify(None) == (None, "no munge credential sent")
    assert auth.identify("MUNGE bad")[1] == "munge credential refused: Invalid credential"


def test_slurm_conf_private_data_socket_slurm_user(tmp_path: Path) -> None:
    (tmp_path / "extra.conf").write_text("PrivateData=usage\n")
    text = ("# PrivateData=jobs is a comment\nSlurmUser=slurm\nAuthInfo=socket=/run/m.sock,cred_expire=30\n"
            "include extra.conf\n")
    info = parse_slurm_conf(text, str(tmp_path / "slurm.conf"))
    assert info.private_data == frozenset({"usage"}) and info.private_jobs
    assert info.munge_socket == "/run/m.sock" and info.slurm_user == "slurm"
    public = parse_slurm_conf("privatedata=cloud\n", "x")
    assert not public.private_jobs and public.munge_socket is None


def test_unreadable_slurm_conf_fails_closed(tmp_path: Path) -> None:
    info = read_slurm_conf(str(tmp_path / "missing.conf"))
    assert info.private_jobs and "cannot read" in (info.error or "")
