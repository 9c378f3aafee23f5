"""Who is asking: munge credentials, the Slurm way.

The CLI runs ``munge -n`` (an empty credential stamped by the local munged with the caller's uid) and sends
it in the ``Authorization: MUNGE <credential>`` header; the server decodes it with ``unmunge`` and trusts
the uid inside, exactly as slurmctld trusts its clients. munged refuses to decode a credential twice
(replay) or after its TTL, so a credential copied off the wire is worth one request for a few minutes.
Without a valid credential a caller is anonymous and gets cluster-wide aggregates only.

Both directions run the munge tools as subprocesses from argument lists; the credential goes in on stdin.
The decoder is an injectable callable so tests can run without munged.
"""

from __future__ import annotations

import os
import pwd
import re
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass

AUTH_SCHEME = "MUNGE"
TIMEOUT_S = 5.0


class AuthError(RuntimeError):
    """A credential could not be made or was refused; the message says why and what to do."""


@dataclass(frozen=True)
class Identity:
    """A decoded caller. `privileged` callers (root, SlurmUser, operators) see every job and app."""

    uid: int
    user: str
    privileged: bool = False


#: Decodes a credential into a uid; raises AuthError when munged refuses it.
Decoder = Callable[[str], int]


def _socket_args(socket: str | None) -> list[str]:
    return ["--socket", socket] if socket else []


def encode_credential(socket: str | None = None, timeout: float = TIMEOUT_S) -> str:
    """A fresh credential for the calling user (``munge -n``); AuthError says what is missing."""
    try:
        res = subprocess.run(["munge", "-n", *_socket_args(socket)], capture_output=True, text=True,
                             timeout=timeout, check=False, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise AuthError("munge is not installed (apt-get install munge)") from None
    except subprocess.TimeoutExpired:
        raise AuthError(f"munge did not answer within {timeout:g} s: is munged running?") from None
    if res.returncode != 0:
        where = f" at {socket}" if socket else ""
        raise AuthError(f"munge -n failed: {res.stderr.strip() or res.returncode}: is munged running{where}?")
    return res.stdout.strip()


def parse_unmunge(text: str) -> int:
    """The UID from unmunge metadata ("UID: alice (1001)", or "UID: 1001" with --numeric); AuthError if absent.

    Without --numeric a refusal names its cause in STATUS ("Replayed credential (17)"), which we pass on.
    """
    status = uid = None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip().upper(), value.strip()
        if key == "STATUS":
            status = value
        elif key == "UID":
            in_parens = re.search(r"\((\d+)\)", value)  # "themis-alice (1001)" without --numeric
            uid = in_parens.group(1) if in_parens else (value.split() or [""])[0]
    if status is not None and not status.startswith("Success") and status != "0":
        raise AuthError(f"munge credential refused: {status}")
    if not uid or not uid.isdigit():
        raise AuthError("munge credential without a UID")
    return int(uid)


def unmunge_decoder(socket: str | None = None, timeout: float = TIMEOUT_S) -> Decoder:
    """A Decoder that runs ``unmunge`` (credential on stdin, STATUS and UID as text, payload discarded)."""

    def decode(credential: str) -> int:
        args = ["unmunge", "--keys=STATUS,UID", "--output=/dev/null", *_socket_args(socket)]
        try:
            res = subprocess.run(args, input=credential, capture_output=True, text=True, timeout=timeout,
                                 check=False)
        except FileNotFoundError:
            raise AuthError("unmunge is not installed on the server (apt-get install munge)") from None
        except subprocess.TimeoutExpired:
            raise AuthError("unmunge did not answer in time") from None
        if res.returncode != 0:
            if "STATUS" in res.stdout:
                parse_unmunge(res.stdout)  # raises naming munged's reason ("Replayed credential (17)")
            msg = res.stderr.strip().removeprefix("unmunge: Error: ").removeprefix("unmunge: ")
            raise AuthError(f"munge credential refused: {msg or f'exit {res.returncode}'}")
        return parse_unmunge(res.stdout)

    return decode


def user_name(uid: int) -> str:
    """The login name of `uid`, or the number as text for uids unknown to this host."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class Authenticator:
    """Turns an Authorization header into an Identity (or None plus the reason)."""

    def __init__(self, decoder: Decoder, privileged: Iterable[str | int] = (),
                 names: Callable[[int], str] = user_name) -> None:
        self.decoder = decoder
        self.privileged_names = {str(p) for p in privileged}
        self.names = names

    def is_privileged(self, uid: int, name: str) -> bool:
        return uid == 0 or name in self.privileged_names or str(uid) in self.privileged_names

    def identify(self, header: str | None) -> tuple[Identity | None, str]:
        """(identity, "") for a valid credential; (None, why) otherwise."""
        if not header:
            return None, "no munge credential sent"
        scheme, _, cred = header.strip().partition(" ")
        if scheme.upper() != AUTH_SCHEME or not cred.strip():
            return None, f"Authorization header is not '{AUTH_SCHEME} <credential>'"
        try:
            uid = self.decoder(cred.strip())
        except AuthError as e:
            return None, str(e)
        name = self.names(uid)
        return Identity(uid, name, self.is_privileged(uid, name)), ""


def local_identity(privileged: Iterable[str | int] = ()) -> Identity:
    """The identity of this process (for reading the state database directly, where the OS is the guard)."""
    uid = os.geteuid()
    name = user_name(uid)
    names = {str(p) for p in privileged}
    return Identity(uid, name, uid == 0 or name in names or str(uid) in names)
