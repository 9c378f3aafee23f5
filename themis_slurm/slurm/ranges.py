"""Integer range lists as Slurm writes them: ``0-3,8,10-11`` (GPU indices, core ids, sockets).

Kept apart from hostlists because these are bare numbers: no prefix, no brackets (an optional outer
``[...]`` is tolerated, as Slurm prints ``Cores=[0-3]`` in some places).
"""

from __future__ import annotations

from collections.abc import Iterable


def parse_int_list(text: str) -> tuple[int, ...]:
    """``"0-2,5"`` -> ``(0, 1, 2, 5)``; sorted, de-duplicated. ``""`` -> ``()``.

    Raises ValueError naming the string for anything else (negative numbers, reversed ranges, junk).
    """
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    if not body:
        return ()
    out: set[int] = set()
    for part in body.split(","):
        lo_s, sep, hi_s = part.strip().partition("-")
        try:
            lo = int(lo_s, 10)
            hi = int(hi_s, 10) if sep else lo
        except ValueError:
            raise ValueError(f"bad number list {text!r}: {part!r} is not N or N-M") from None
        if lo < 0 or hi < lo:
            raise ValueError(f"bad number list {text!r}: {part!r} is not an increasing range of naturals")
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


def fold_int_list(values: Iterable[int]) -> str:
    """``(0, 1, 2, 5)`` -> ``"0-2,5"``: the inverse of `parse_int_list` (sorted, de-duplicated)."""
    nums = sorted(set(values))
    parts: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(parts)
