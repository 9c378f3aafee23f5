"""Logical lines of Slurm-style configuration files (gres.conf, topology.conf).

Slurm's config reader: ``#`` starts a comment (``\\#`` is a literal ``#``), a trailing backslash joins the
next physical line, and each line is whitespace-separated ``Key=Value`` pairs with case-insensitive keys.
We keep the physical line number of the first line of each logical line for error messages.
"""

from __future__ import annotations

from dataclasses import dataclass

from themis_slurm.slurm.errors import ConfigError


@dataclass(frozen=True)
class ConfLine:
    """One logical line: its ``(key, value)`` pairs in order, keys as written, plus where it came from."""

    path: str
    line: int
    pairs: tuple[tuple[str, str], ...]

    def error(self, field: str, value: str, expected: str) -> ConfigError:
        """A ConfigError pointing at this line."""
        return ConfigError(self.path, self.line, field, value, expected)


def _strip_comment(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] == "#":
            out.append("#")
            i += 2
            continue
        if c == "#":
            break
        out.append(c)
        i += 1
    return "".join(out)


def logical_lines(text: str, path: str) -> list[ConfLine]:
    """Split ``text`` into logical lines of key/value pairs (comments, continuations, blank lines handled).

    ``Include``/``include`` lines are refused with a ConfigError: following them would make this pure
    parser read other files, and a config check that silently ignores part of the config is worse than
    one that says it cannot check it.
    """
    result: list[ConfLine] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        body = _strip_comment(raw).rstrip()
        if not pending:
            start = number
        if body.endswith("\\"):
            pending += body[:-1] + " "
            continue
        body = pending + body
        pending = ""
        if not body.strip():
            continue
        result.append(_pairs(body, path, start))
    if pending.strip():
        result.append(_pairs(pending, path, start))
    return result


def _pairs(body: str, path: str, line: int) -> ConfLine:
    tokens = body.split()
    if tokens[0].lower() == "include":
        raise ConfigError(path, line, tokens[0], " ".join(tokens[1:]),
                          "no Include lines (not supported: inline the included file)")
    pairs: list[tuple[str, str]] = []
    for tok in tokens:
        key, sep, value = tok.partition("=")
        if not sep or not key:
            raise ConfigError(path, line, tok, "", "Key=Value pairs separated by spaces")
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        pairs.append((key, value))
    return ConfLine(path, line, tuple(pairs))
