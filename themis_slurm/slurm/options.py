"""The two Themis strings a Slurm job carries: the trusted AdminComment record and the user's Comment.

job_submit.lua validates the user's ``--comment themis:...`` options at submit and writes a normalised
record into AdminComment, which only admins can change:

    themis:v1;app=<name>;model=<model>;sens=<class>;est=<seconds>[;ckpt=<yes|no|seconds>][;throttle=..][;nodes=..]

The daemon trusts only that record for app grouping, profile and work estimate. The Comment stays the
user's to edit while the job runs, so it is read for one thing only, the progress report
``themis:progress=0.42`` (grammar as at submit: ``themis:`` options separated by ``,``, then an optional
``;`` and free text). Both parsers are total: they never raise, they return what they could read plus a
message for what they could not, because one user's malformed string must not stop a scheduling cycle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from themis_slurm.slurm import hostlist

RECORD_PREFIX = "themis:v"
RECORD_VERSION = "themis:v1"
COMMENT_PREFIX = "themis:"


@dataclass(frozen=True, slots=True)
class Record:
    """The fields of a ``themis:v1`` AdminComment record (empty values as None)."""

    app: str | None = None
    model: str | None = None
    sens: str | None = None
    est_s: float | None = None
    #: when the job saves its state (``--themis-ckpt``): None at Themis's warning (``yes``, also when the owner
    #: said nothing), ``math.inf`` never (``no``: a preemption loses its whole run), else every so many seconds
    ckpt_s: float | None = None
    #: whether the owner gave ``ckpt`` at all (themisd learns it only where they did not)
    ckpt_given: bool = False
    #: an array's ``%N`` throttle at submit: the owner can raise Slurm's own copy (slurmctld applies
    #: ``ArrayTaskThrottle=`` before job_submit.lua's refusal), never this one
    throttle: int | None = None
    #: the owner's -w list at submit (Themis's pin replaces ReqNodeList, so this is where it survives)
    nodes: tuple[str, ...] = ()

    @property
    def profile(self) -> str | None:
        """Placement profile: the model when given, else the sensitivity class."""
        return self.model or self.sens


def is_record(admin_comment: str) -> bool:
    """True when AdminComment carries a Themis record of any version (the job is Themis-managed)."""
    return admin_comment.strip().startswith(RECORD_PREFIX)


def parse_record(admin_comment: str) -> tuple[Record, list[str]]:
    """Parse the AdminComment record; returns the record and problems found (empty when clean).

    Unknown keys are ignored (a later v1 writer may add fields); a different version gives defaults and
    a problem, so an old daemon does not misread a newer job_submit.lua.
    """
    text = admin_comment.strip()
    parts = text.split(";")
    head = parts[0].strip()
    if head != RECORD_VERSION:
        return Record(), [f"AdminComment record {shorten(head)!r}: expected {RECORD_VERSION}"]
    fields: dict[str, str] = {}
    problems: list[str] = []
    for part in parts[1:]:
        if not part.strip():
            continue
        key, eq, value = part.partition("=")
        if not eq:
            problems.append(f"AdminComment record field {shorten(part)!r}: expected key=value")
            continue
        fields[key.strip().lower()] = value.strip()
    est: float | None = None
    raw_est = fields.get("est", "")
    if raw_est:
        try:
            est = float(int(raw_est))
            if est <= 0:
                raise ValueError
        except ValueError:
            est = None
            problems.append(f"AdminComment record field est={shorten(raw_est)!r}: expected whole seconds > 0")
    throttle: int | None = None
    raw_throttle = fields.get("throttle", "")
    if raw_throttle:
        if raw_throttle.isdigit() and int(raw_throttle) > 0:
            throttle = int(raw_throttle)
        else:
            problems.append(f"AdminComment record field throttle={shorten(raw_throttle)!r}: expected a whole "
                            "number > 0")
    ckpt_s: float | None = None
    raw_ckpt = fields.get("ckpt", "").lower()
    seconds = raw_ckpt.isascii() and raw_ckpt.isdigit() and int(raw_ckpt) > 0
    ckpt_given = raw_ckpt in ("yes", "no") or seconds
    if raw_ckpt == "no":
        ckpt_s = math.inf
    elif seconds:
        ckpt_s = float(int(raw_ckpt))
    elif raw_ckpt and not ckpt_given:
        problems.append(f"AdminComment record field ckpt={shorten(raw_ckpt)!r}: expected yes, no or whole "
                        "seconds > 0")
    nodes: tuple[str, ...] = ()
    if fields.get("nodes"):
        try:
            nodes = tuple(hostlist.expand(fields["nodes"]))
        except ValueError:
            problems.append(f"AdminComment record field nodes={shorten(fields['nodes'])!r}: expected a hostlist")
    return Record(app=fields.get("app") or None, model=fields.get("model") or None,
                  sens=fields.get("sens") or None, est_s=est, ckpt_s=ckpt_s, ckpt_given=ckpt_given,
                  throttle=throttle, nodes=nodes), problems


def parse_progress(comment: str) -> tuple[float | None, str | None]:
    """Progress from a Comment like ``themis:progress=0.42`` -> (0.42, None).

    No Themis prefix or no progress key -> (None, None). A bad value -> (None, message naming the field
    and the value). Other ``themis:`` keys (app=, est= kept from submit) are ignored here.
    """
    text = comment.strip()
    if text[:len(COMMENT_PREFIX)].lower() != COMMENT_PREFIX:
        return None, None
    options = text[len(COMMENT_PREFIX):].split(";", 1)[0]
    found: list[str] = []
    for item in options.split(","):
        key, eq, value = item.partition("=")
        if eq and key.strip().lower() == "progress":
            found.append(value.strip())
    if not found:
        return None, None
    if len(found) > 1:
        return None, f"Comment field progress given {len(found)} times: expected it once"
    raw = found[0]
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        return None, f"Comment field progress={shorten(raw)!r}: expected a number between 0 and 1"
    return value, None


def has_user_hold(comment: str) -> bool:
    """True when the Comment's themis: options carry ``hold=user`` (the owner's own hold).

    job_submit.lua writes it when the owner runs ``scontrol hold`` on a managed job (Slurm cannot tell that
    hold from Themis's) and removes it on the owner's ``scontrol release``; the owner may also edit it.
    """
    text = comment.strip()
    if text[:len(COMMENT_PREFIX)].lower() != COMMENT_PREFIX:
        return False
    options = text[len(COMMENT_PREFIX):].split(";", 1)[0]
    for item in options.split(","):
        key, eq, value = item.partition("=")
        if eq and key.strip().lower() == "hold" and value.strip().lower() == "user":
            return True
    return False


def shorten(value: str, limit: int = 40) -> str:
    """User strings echoed in messages are cut to stay readable in logs."""
    return value if len(value) <= limit else value[: limit - 3] + "..."
