"""One table of Themis option values with the verdict every checker must give (the grammar's test cases).

Run against the SPANK plugin's checks (check_options), job_submit.lua through both of its inputs
(``--comment=themis:`` and the plugin's spank_job_env entry) in tests/unit/slurm/test_option_grammar.py,
and in part on the real cluster in tests/slurm/test_spank.py. A verdict is the normalised value the
AdminComment record keeps (seconds for est), or None for "rejected".
"""

from __future__ import annotations

from themis_slurm.slurm.option_grammar import EST_MAX_S, MODELS, SENS_CLASSES

CASES: list[tuple[str, str, str | int | None]] = [
    ("app", "bert", "bert"),
    ("app", "Bert-2.a_b", "Bert-2.a_b"),
    ("app", "7", "7"),
    ("app", "a" * 64, "a" * 64),
    ("app", " padded ", "padded"),
    ("app", "a" * 65, None),
    ("app", "-x", None),
    ("app", ".hidden", None),
    ("app", "", None),
    ("app", "a b", None),
    ("app", "a=b", None),
    ("app", "a/b", None),
    ("app", "$(id)", None),
    ("app", "caf\u00e9", None),
    ("app", "a\x07b", None),       # a control character: echoed as '?'
    ("model", "resnet50", "resnet50"),
    ("model", "RESNET50", "resnet50"),
    ("model", "gpt5", None),
    ("model", "high", None),        # a class is not a model
    ("model", "", None),
    ("sens", "None", "none"),
    ("sens", "extreme", None),
    ("sens", "vgg16", None),
    ("est", "90s", 90),
    ("est", "45m", 2700),
    ("est", "6h", 21600),
    ("est", "6H", 21600),
    ("est", "2d", 172800),
    ("est", "1h30m", 5400),
    ("est", "1d2h3m4s", 93784),
    ("est", "12:00:00", 43200),
    ("est", "1-12:00:00", 129600),
    ("est", "365d", EST_MAX_S),
    ("est", "364-23:59:59", EST_MAX_S - 1),
    ("est", " 6h ", 21600),
    ("est", "0s", None),
    ("est", "00:00:00", None),
    ("est", "366d", None),
    ("est", "365d1s", None),
    ("est", "abc", None),
    ("est", "10", None),            # a bare number has no unit
    ("est", "30m1h", None),         # units in order
    ("est", "1h1h", None),
    ("est", "1h 30m", None),
    ("est", "1:60:00", None),
    ("est", "1:00:60", None),
    ("est", "12:00", None),
    ("est", "1-", None),
    ("est", "1234-00:00:00", None),
    ("est", "1000000000s", None),
    ("est", "-5m", None),
    ("est", "", None),
    ("ckpt", "yes", "yes"),
    ("ckpt", "No", "no"),
    ("ckpt", " no ", "no"),
    ("ckpt", "30m", 1800),
    ("ckpt", "1H30M", 5400),
    ("ckpt", "1-00:00:00", 86400),
    ("ckpt", "365d", EST_MAX_S),
    ("ckpt", "0s", None),
    ("ckpt", "366d", None),
    ("ckpt", "maybe", None),
    ("ckpt", "true", None),
    ("ckpt", "10", None),           # a bare number has no unit
    ("ckpt", "", None),
]
CASES += [("model", m, m) for m in MODELS] + [("sens", c, c) for c in SENS_CLASSES]

#: Values that cannot travel inside --comment=themis: (its separators): checked through the plugin paths only.
COMMENT_UNSAFE = (",", ";")
