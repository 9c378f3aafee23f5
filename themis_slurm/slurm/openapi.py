"""Tolerant accessors for Slurm's JSON, across openapi/data_parser versions.

22.05 (openapi v0.0.38) prints bare numbers and uses NO_VAL (4294967294) / INFINITE (4294967295) as
in-band markers; v0.0.40 and later wrap numbers as ``{"set": true, "infinite": false, "number": 5}`` and
turn single strings such as job_state into lists. These helpers hide both so the parsers read one shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NO_VAL = 0xFFFFFFFE
INFINITE = 0xFFFFFFFF
NO_VAL64 = 0xFFFFFFFFFFFFFFFE
INFINITE64 = 0xFFFFFFFFFFFFFFFF
_MARKERS = {NO_VAL, INFINITE, NO_VAL64, INFINITE64}
_NULL_TEXT = frozenset({"(null)", "None", "N/A"})


def is_infinite(value: Any) -> bool:
    """True for INFINITE in either shape (``4294967295`` or ``{"infinite": true}``)."""
    if isinstance(value, Mapping):
        return bool(value.get("infinite"))
    return isinstance(value, int) and not isinstance(value, bool) and value in (INFINITE, INFINITE64)


def number(value: Any) -> int | None:
    """An integer, or None when unset/infinite/NO_VAL/missing. Accepts ints, numeric strings, wrappers."""
    if isinstance(value, Mapping):
        if value.get("infinite") or value.get("set") is False:
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float):
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            return None
    if not isinstance(value, int) or value in _MARKERS:
        return None
    return value


def text(value: Any) -> str:
    """A string field; None / ``(null)`` / ``None`` -> ``""``; lists joined with commas."""
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return ",".join(text(v) for v in value if text(v))
    s = str(value)
    return "" if s in _NULL_TEXT else s


def words(value: Any) -> list[str]:
    """A list-or-string field as a list of strings (``"IDLE"`` -> ``["IDLE"]``, ``None`` -> ``[]``)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value and value not in _NULL_TEXT else []
    return [str(v) for v in value]


def flag(value: Any, default: bool = False) -> bool:
    """A boolean in either shape (``true``, ``1``, ``"1"``, ``"yes"``)."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, Mapping):
        n = number(value)
        return default if n is None else bool(n)
    if isinstance(value, int):
        return bool(value)
    return str(value).strip().lower() in {"1", "true", "yes", "y"}


def time_epoch(value: Any) -> int | None:
    """An epoch-seconds time; 0 (Slurm's "not yet") and unset -> None."""
    n = number(value)
    return n if n else None


def api_version(doc: Mapping[str, Any]) -> str:
    """The data parser version named in ``meta`` (``v0.0.38``, ``v0.0.40``...), or ``""`` if absent."""
    meta = doc.get("meta") or {}
    plugin = meta.get("plugin") or {}
    for key in ("data_parser", "type"):
        v = text(plugin.get(key))
        if v:
            return v.rsplit("/", 1)[-1]
    return ""
