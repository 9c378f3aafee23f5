"""No function in themis_slurm/ is longer than 80 lines (issue #35's code-shape rule).

A function's length is ``end_lineno - lineno + 1`` of its ``def`` (docstring included, decorators not), as
the issue measured it: a longer one is a list of steps that wants names, the way the core's round is a list
of phases. Methods and nested functions count on their own, each with its full length.
"""

from __future__ import annotations

import ast
from pathlib import Path

import themis_slurm

MAX_LINES = 80
PACKAGE = Path(themis_slurm.__file__).resolve().parent


def too_long(source: str, name: str, limit: int = MAX_LINES) -> list[str]:
    """`file:line name (N lines)` for each function of `source` longer than `limit` lines."""
    out = []
    for node in ast.walk(ast.parse(source, filename=name)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            if length > limit:
                out.append(f"{name}:{node.lineno} {node.name} ({length} lines)")
    return out


def _function(name: str, body_lines: int, indent: str = "") -> str:
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(body_lines))
    return f"{indent}def {name}():\n{body}"


def test_the_measure_counts_def_to_last_line_and_flags_only_longer_functions():
    source = (
        _function("fits", MAX_LINES - 1)
        + "\n@decorator\n"
        + _function("over", MAX_LINES)
        + "\nclass C:\n"
        + _function("method", MAX_LINES, indent="    ")
    )
    assert too_long(source, "m.py") == [
        f"m.py:{MAX_LINES + 3} over ({MAX_LINES + 1} lines)",
        f"m.py:{2 * MAX_LINES + 6} method ({MAX_LINES + 1} lines)",
    ]


def test_no_function_in_the_package_is_longer_than_80_lines():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50, f"expected the package's modules under {PACKAGE}, found {len(files)}"
    offenders = [hit for f in files for hit in too_long(f.read_text(), str(f.relative_to(PACKAGE.parent)))]
    assert not offenders, (
        f"functions longer than {MAX_LINES} lines (split them into named steps):\n" + "\n".join(offenders)
    )
