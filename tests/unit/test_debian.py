"""debian/ agrees with the package it packs: the version, and the site files debian/rules installs exist."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "themis_slurm" / "site"


def test_the_debian_version_is_the_packages() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    first = (REPO / "debian" / "changelog").read_text().splitlines()[0]
    found = re.match(r"themis-slurm \(([^)]+)\)", first)
    assert found, first
    assert found.group(1) == cfg["metadata"]["version"]  # a native package: no Debian revision


def test_rules_install_existing_site_files() -> None:
    rules = (REPO / "debian" / "rules").read_text()
    named = set(re.findall(r"\$\(DEST\)\$\(SHARE\)/([\w./*-]+)", rules))
    assert {"themis.yaml", "themisd.env", "systemd/*"} <= named
    for rel in named:
        assert list(SITE.glob(rel)), rel
    assert "/usr/bin/python3.11 -m venv" in rules  # the system Python: other users can run it
    link = re.search(r"ln -s \$\(SHARE\)/(\S+) ", rules)
    assert link and (SITE / link.group(1)).is_file()
