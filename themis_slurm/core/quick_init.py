"""A faster ``__init__`` for the frozen, slotted dataclasses built in the hot loops (jobs, apps, gangs, grants).

Why: a frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__(self, name,
value)``, a global lookup, an attribute lookup and a generic attribute set that looks the name up in the
class's MRO, once per field. The simulator builds a :class:`~themis_slurm.core.workload.Job` for every
running job at every policy call and an :class:`~themis_slurm.core.workload.App` for every app, and a Themis
round builds gangs and bundles by the thousand: those ``__init__`` bodies were 8% of a Themis run of the
paper workload (py-spy, 64 GPUs) and 4-5% of an ftf run. Setting each slot through its own member
descriptor (the C setter Python itself uses for a slot, bound once per class) does the same in half the
time: a Job, 12 fields, 1.4 us -> 0.8 us.

:func:`quick_init` keeps everything else the dataclass made (frozen ``__setattr__``, ``__eq__``, ``__hash__``,
``__repr__``, pickling, :func:`dataclasses.replace`): the same signature, defaults and ``__post_init__``
call, and instances equal field by field to those the generated ``__init__`` builds
(tests/unit/core/test_quick_init.py). Classes it cannot reproduce exactly (no slots, keyword-only fields,
init-only variables) are refused, so it never changes what a constructor means.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import TypeVar

T = TypeVar("T")

_MISSING = dataclasses.MISSING


def quick_init(cls: type[T]) -> type[T]:
    """Replace the ``__init__`` of the slotted dataclass `cls` by one that sets its slots directly.

    Apply it above ``@dataclass(..., slots=True)``. The original is kept as ``__init__.__wrapped__``
    (tests compare the two). TypeError when `cls` is not a slotted dataclass, or has fields the generated
    ``__init__`` treats specially (keyword-only fields, ``InitVar``): those keep dataclasses' own.
    """
    if not dataclasses.is_dataclass(cls) or "__slots__" not in cls.__dict__:
        raise TypeError(f"quick_init: {cls.__qualname__} is not a dataclass with slots=True")
    original = cls.__init__
    fields = [f for f in dataclasses.fields(cls) if f.init]
    names = [f.name for f in fields]
    params_of = inspect.signature(original).parameters
    expected = list(params_of)[1:]  # without self
    if expected != names or any(f.kw_only for f in fields):
        raise TypeError(
            f"quick_init: {cls.__qualname__}'s __init__ takes {expected}, not its fields {names} positionally "
            f"(keyword-only fields or init-only variables are not supported)"
        )
    env: dict[str, object] = {}
    params: list[str] = []
    body: list[str] = []
    for i, f in enumerate(fields):
        env[f"_set{i}"] = cls.__dict__[f.name].__set__  # the slot's member descriptor
        value = f.name
        if f.default is not _MISSING:
            env[f"_default{i}"] = f.default
            params.append(f"{f.name}=_default{i}")
        elif f.default_factory is not _MISSING:
            # the generated __init__'s own marker for "use the factory" (shown as <factory> in signatures)
            env[f"_unset{i}"] = params_of[f.name].default
            env[f"_factory{i}"] = f.default_factory
            params.append(f"{f.name}=_unset{i}")
            value = f"_factory{i}() if {f.name} is _unset{i} else {f.name}"
        else:
            params.append(f.name)
        body.append(f"        _set{i}(self, {value})")
    if hasattr(cls, "__post_init__"):
        body.append("        self.__post_init__()")
    if not body:
        body.append("        pass")
    # The setters and defaults are the closure's variables (no global lookups); the source is generated
    # from field names only, which dataclasses has already checked are identifiers.
    source = (
        f"def _make({', '.join(env)}):\n"
        f"    def __init__(self, {', '.join(params)}):\n" + "\n".join(body) + "\n"
        "    return __init__\n"
    )
    namespace: dict[str, object] = {}
    exec(source, namespace)  # noqa: S102 - generated from the dataclass's own field names, as dataclasses does
    init = namespace["_make"](**env)  # type: ignore[operator]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = original.__doc__
    init.__annotations__ = dict(original.__annotations__)
    init.__wrapped__ = original
    cls.__init__ = init  # type: ignore[misc]
    return cls
