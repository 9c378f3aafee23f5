"""Shared reading and validation for the trace loaders.

Every loader has the same contract: each row is validated field by field; by default the first bad row
raises a TraceError naming file:line, field and value; with ``skip_bad=True`` bad rows are counted, kept as
BadRow records and summarised in the Trace's notes. Keeping that logic here makes the three loaders behave
(and word their messages) alike.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from os import PathLike
from pathlib import Path
from typing import TypeVar

from themis_slurm.sim.trace import BadRow, Trace, TraceError, TraceJob, normalize_model

PathArg = str | PathLike[str]
R = TypeVar("R")  # one row as a loader's reader yields it (CSV fields, a JSON record, ...)
NOTE_FIRST_REASONS = 3  # how many skipped-row reasons a Trace's notes quote


class RowContext:
    """Field parsers bound to one row, so every error carries file:line without repeating it."""

    def __init__(self, path: str, line: int) -> None:
        self.path = path
        self.line = line

    def error(self, field: str | None, value: str | None, expected: str) -> TraceError:
        return TraceError(self.path, self.line, field, value, expected)

    def text(self, field: str, value: str) -> str:
        value = value.strip()
        if not value:
            raise self.error(field, value, "a non-empty value")
        return value

    def positive_int(self, field: str, value: str) -> int:
        text = value.strip()
        try:
            number = int(text)
        except ValueError:
            raise self.error(field, value, "a positive integer") from None
        if number < 1:
            raise self.error(field, value, "a positive integer")
        return number

    def number(self, field: str, value: str, *, minimum: float | None = None, strict: bool = False) -> float:
        """A finite float; ``minimum`` is inclusive unless ``strict``."""
        if minimum is None:
            expected = "a finite number"
        elif minimum == 0:
            expected = "a positive number" if strict else "a number >= 0"
        else:
            expected = f"a number {'>' if strict else '>='} {minimum:g}"
        try:
            number = float(value.strip())
        except ValueError:
            raise self.error(field, value, expected) from None
        if not math.isfinite(number):
            raise self.error(field, value, expected)
        if minimum is not None and (number <= minimum if strict else number < minimum):
            raise self.error(field, value, expected)
        return number

    def choice(self, field: str, value: str, allowed: Sequence[str]) -> str:
        text = value.strip()
        if text not in allowed:
            raise self.error(field, value, "one of " + ", ".join(repr(a) for a in allowed))
        return text

    def timestamp_s(self, field: str, value: str) -> float:
        """Seconds since the epoch from 'YYYY-MM-DD HH:MM:SS' (ISO 8601; naive means UTC) or a plain number."""
        text = value.strip()
        try:
            return float(text) if _looks_numeric(text) else _iso_seconds(text)
        except ValueError:
            raise self.error(field, value, "a timestamp like '2018-06-16 04:51:49' or a number of seconds") from None


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _iso_seconds(text: str) -> float:
    stamp = datetime.fromisoformat(text)
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def open_text(path: PathArg) -> Iterator[str]:
    """Lines of a UTF-8 file (a BOM is dropped); undecodable bytes become a TraceError."""
    name = str(path)
    try:
        with Path(path).open(encoding="utf-8-sig", newline="") as handle:
            yield from handle
    except UnicodeDecodeError as exc:
        raise TraceError(name, None, None, None, f"the file is not UTF-8 text ({exc.reason})") from None


def csv_rows(path: PathArg, delimiter: str = ",") -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of every non-blank CSV record; fields are stripped of surrounding blanks."""
    reader = csv.reader(open_text(path), delimiter=delimiter, skipinitialspace=True)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise TraceError(str(path), reader.line_num, None, None, f"malformed CSV: {exc}") from None
        if not row or all(not cell.strip() for cell in row):
            continue
        yield reader.line_num, [cell.strip() for cell in row]


def check_header(
    path: str,
    line: int,
    header: Sequence[str],
    required: Sequence[str],
    optional: Sequence[str] = (),
) -> dict[str, int]:
    """Column positions by name; unknown, duplicate or missing columns are a TraceError at the header."""
    known = (*required, *optional)
    expected = "the header " + ",".join(known) + (f" (optional: {','.join(optional)})" if optional else "")
    positions: dict[str, int] = {}
    for index, name in enumerate(header):
        if name not in known:
            raise TraceError(path, line, "header", name, f"a known column; expected {expected}")
        if name in positions:
            raise TraceError(path, line, "header", name, "a column named only once")
        positions[name] = index
    missing = [name for name in required if name not in positions]
    if missing:
        raise TraceError(path, line, "header", None, f"missing column(s) {', '.join(missing)}; expected {expected}")
    return positions


def check_width(ctx: RowContext, row: Sequence[str], width: int, names: Sequence[str]) -> None:
    if len(row) != width:
        raise ctx.error("columns", str(len(row)), f"{width} columns ({', '.join(names)})")


def header_and_rows(path: PathArg, delimiter: str = ",") -> tuple[int, list[str], Iterator[tuple[int, list[str]]]]:
    """Split a CSV into its header and its data rows; an empty file is a TraceError."""
    rows = csv_rows(path, delimiter)
    first = next(rows, None)
    if first is None:
        raise TraceError(str(path), None, None, None, "the file is empty; expected a header line and job rows")
    return first[0], first[1], rows


class Collector:
    """Runs a row parser over rows, applying the fail-fast / skip-bad policy and de-duplicating job ids."""

    def __init__(self, path: PathArg, skip_bad: bool) -> None:
        self.path = str(path)
        self.skip_bad = skip_bad
        self.jobs: list[TraceJob] = []
        self.bad: list[BadRow] = []
        self.rows = 0
        self._first_line: dict[str, int] = {}
        self._unknown_raw: dict[int, str] = {}  # line -> source model name without a profile

    def run(self, rows: Iterable[tuple[int, R]], parse: Callable[[RowContext, R], TraceJob | None]) -> None:
        """Parse every row; ``parse`` returns None for a row that is valid but deliberately not a job (a
        loader that does so counts those rows itself, for its notes)."""
        for line, row in rows:
            self.rows += 1
            ctx = RowContext(self.path, line)
            try:
                job = parse(ctx, row)
                if job is None:
                    continue
                first = self._first_line.get(job.job_id)
                if first is not None:
                    raise ctx.error("job id", job.job_id, f"a unique job id (already on line {first})")
            except TraceError as exc:
                if not self.skip_bad:
                    raise
                self.bad.append(BadRow.from_error(exc))
                continue
            self._first_line[job.job_id] = line
            self.jobs.append(job)

    def model(self, ctx: RowContext, raw: str | None) -> str | None:
        """Normalised model name; unknown names are remembered so the notes can count them (kept rows only)."""
        model = normalize_model(raw)
        if model is None and raw:
            self._unknown_raw[ctx.line] = raw
        return model

    def trace(self, notes: Sequence[str] = ()) -> Trace:
        """The Trace of the good rows; no good rows at all is a TraceError."""
        all_notes = list(notes)
        if self.bad:
            reasons = "; ".join(b.message for b in self.bad[:NOTE_FIRST_REASONS])
            more = " ..." if len(self.bad) > NOTE_FIRST_REASONS else ""
            all_notes.append(f"skipped {len(self.bad)} bad row(s) of {self.rows}; first: {reasons}{more}")
        unknown = Counter(self._unknown_raw[j.line] for j in self.jobs if j.line in self._unknown_raw)
        if unknown:
            listed = ", ".join(f"{name} ({count} jobs)" for name, count in unknown.most_common())
            all_notes.append(f"models without a placement profile (simulated with the default sensitivity): {listed}")
        if not self.jobs:
            if self.rows == 0:
                raise TraceError(self.path, None, None, None, "the file has a header but no job rows")
            first = self.bad[0].message if self.bad else ""
            raise TraceError(self.path, None, None, None, f"no valid job rows ({len(self.bad)} bad; first: {first})")
        return Trace(
            jobs=tuple(self.jobs),
            source=self.path,
            skipped=len(self.bad),
            notes=tuple(all_notes),
            bad_rows=tuple(self.bad),
        )
