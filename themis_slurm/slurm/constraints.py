"""A job's ``--constraint`` as Slurm writes it, evaluated against node features (pure).

Slurm starts a job only on nodes whose active features satisfy its constraint, a check Themis must make
before it pins the job (issue 37): a pin onto a node without the feature is refused, the release times
out, and the GPUs that would fit the job sit idle meanwhile. Features are static per node, so the check
narrows the job's allowed nodes like ``-x`` does (slurm/snapshot.placement_limits).

Evaluated exactly: feature names joined by ``&`` (and), ``|`` (or) and parentheses, ``&`` binding tighter
than ``|`` as in Slurm. Not evaluated (`parse` returns None, and Themis does not narrow: Slurm decides,
and a refused release is learned as before): node counts (``a*2``), matching brackets (``[a|b]``, one
choice for all the job's nodes), and anything else (``,``, spaces, ``!``) Slurm may read in a way this
small grammar does not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

_TOKEN = re.compile(r"\s*(?:([&|()])|([A-Za-z0-9_.:+\-]+))")
_NOT_EXACT = re.compile(r"[\[\]*,!]")


@dataclass(frozen=True, slots=True)
class Feature:
    name: str

    def holds(self, features: frozenset[str]) -> bool:
        return self.name in features


@dataclass(frozen=True, slots=True)
class All:
    terms: tuple[Expr, ...]

    def holds(self, features: frozenset[str]) -> bool:
        return all(t.holds(features) for t in self.terms)


@dataclass(frozen=True, slots=True)
class Any_:
    terms: tuple[Expr, ...]

    def holds(self, features: frozenset[str]) -> bool:
        return any(t.holds(features) for t in self.terms)


Expr = Feature | All | Any_


def parse(text: str) -> Expr | None:
    """The constraint as an expression; None for an empty one or one this module does not evaluate exactly
    (see the module docstring). A malformed one (``a&``, ``(a``) raises ValueError naming it."""
    text = text.strip()
    if not text or _NOT_EXACT.search(text):
        return None
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            return None  # a character Slurm may read otherwise: leave the job to Slurm
        tokens.append(m.group(1) or m.group(2))
        pos = m.end()
    expr, rest = _or(tokens, 0, text)
    if rest != len(tokens):
        raise ValueError(f"constraint {text!r}: unexpected {tokens[rest]!r}")
    return expr


def _joined(tokens: list[str], i: int, text: str, sep: str,
            part: Callable[[list[str], int, str], tuple[Expr, int]],
            node: Callable[[tuple[Expr, ...]], Expr]) -> tuple[Expr, int]:
    """One or more `part`s separated by `sep`, as `node` of them (the part alone when there is one)."""
    terms = []
    term, i = part(tokens, i, text)
    terms.append(term)
    while i < len(tokens) and tokens[i] == sep:
        term, i = part(tokens, i + 1, text)
        terms.append(term)
    return (terms[0] if len(terms) == 1 else node(tuple(terms))), i


def _or(tokens: list[str], i: int, text: str) -> tuple[Expr, int]:
    return _joined(tokens, i, text, "|", _and, Any_)


def _and(tokens: list[str], i: int, text: str) -> tuple[Expr, int]:
    return _joined(tokens, i, text, "&", _atom, All)


def _atom(tokens: list[str], i: int, text: str) -> tuple[Expr, int]:
    if i >= len(tokens):
        raise ValueError(f"constraint {text!r}: ends where a feature name should follow")
    tok = tokens[i]
    if tok == "(":
        expr, i = _or(tokens, i + 1, text)
        if i >= len(tokens) or tokens[i] != ")":
            raise ValueError(f"constraint {text!r}: '(' is not closed")
        return expr, i + 1
    if tok in "&|)":
        raise ValueError(f"constraint {text!r}: {tok!r} where a feature name should be")
    return Feature(tok), i + 1


def matching(text: str, features: Mapping[str, frozenset[str]],
             candidates: Iterable[str]) -> frozenset[str] | None:
    """The candidate nodes whose features (node -> active features) satisfy the constraint `text`; None
    when the constraint is empty or not evaluated exactly (the job is left to Slurm's own check)."""
    expr = parse(text)
    if expr is None:
        return None
    return frozenset(n for n in candidates if expr.holds(features.get(n, frozenset())))
