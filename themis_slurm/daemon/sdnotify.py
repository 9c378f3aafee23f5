"""sd_notify without libsystemd: one datagram to $NOTIFY_SOCKET per message.

systemd's Type=notify needs READY=1 once the daemon serves, WATCHDOG=1 more often than WatchdogSec, and
likes STOPPING=1 / STATUS=... . The protocol is a plain AF_UNIX datagram, so a few lines of socket code
spare a dependency on the systemd Python package. Outside systemd ($NOTIFY_SOCKET unset) every call is a
no-op; a send error is reported once and never stops the daemon.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("themisd")


class Notifier:
    """Sends sd_notify messages to the socket systemd gave us (abstract sockets start with '@')."""

    def __init__(self, address: str | None = None) -> None:
        addr = address if address is not None else os.environ.get("NOTIFY_SOCKET", "")
        self.address = "\0" + addr[1:] if addr.startswith("@") else addr
        self._warned = False

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def watchdog_interval_s(self) -> float | None:
        """Half of WatchdogSec when systemd set one for this process (as sd_watchdog_enabled advises)."""
        usec = os.environ.get("WATCHDOG_USEC")
        pid = os.environ.get("WATCHDOG_PID")
        if not usec or (pid and pid != str(os.getpid())):
            return None
        try:
            return int(usec) / 2e6
        except ValueError:
            return None

    def notify(self, *fields: str) -> bool:
        if not self.address:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
                s.sendto("\n".join(fields).encode(), self.address)
            return True
        except OSError as e:
            if not self._warned:
                log.warning("sd_notify to %s failed: %s", self.address.replace("\0", "@"), e)
                self._warned = True
            return False

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def watchdog(self, status: str = "") -> bool:
        return self.notify("WATCHDOG=1", *([f"STATUS={status}"] if status else []))

    def reloading(self) -> bool:
        return self.notify("RELOADING=1")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")
