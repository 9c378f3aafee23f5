"""Why themisd's state cannot be used: each error is one line naming the file, the problem and the way out.

:class:`StateError` is the writer's (themisd opening or writing its database); :class:`StateUnavailable` and
its finer kinds are the readers' (the status API and the `themis` CLI, which only ever read).
"""

from __future__ import annotations

from pathlib import Path

FRESH_FLAG = "--fresh-state"
#: How an admin asks for a fresh start (the flag of `themisd run`); named in the messages.
FRESH_HINT = f"`themisd run {FRESH_FLAG}`"


class StateError(RuntimeError):
    """The database cannot be used (newer schema than this themisd, corrupt file, ...).

    The message is one line: the file, what is wrong, how to recover. `damaged` is True when the file
    itself is unusable (so that ``--fresh-state`` may move it aside), False for a problem of the
    environment (permissions, a lock held by another process) that moving the file would not fix.
    """

    def __init__(self, message: str, damaged: bool = True) -> None:
        super().__init__(message)
        self.damaged = damaged


def recovery(path: Path) -> str:
    """The way out of a damaged database, as the end of a StateError's line."""
    return (
        f"restore {path} from a backup, or start with {FRESH_HINT} to move it aside and begin with empty "
        "state (the apps' history and the audit log are lost)"
    )


class StateUnavailable(RuntimeError):
    """The state database cannot be read; the message names the file and the cause."""


class StateMissing(StateUnavailable):
    """No state database at that path (a login node, or themisd never ran with this state_dir)."""


class StateForbidden(StateUnavailable):
    """This user may not read the state database (it is for themisd's user and group only)."""
