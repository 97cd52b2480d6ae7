"""Repository-wide guards: the project's name, licences in every distribution, aligned versions."""

import itertools
import re
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest brings tomli there
    import tomli as tomllib

ROOT = Path(__file__).parents[1]
PACKAGES = sorted(path.parent for path in (ROOT / "packages").glob("*/pyproject.toml"))
OLD_NAME = "mem" + "weave"  # spelled in two parts so that this file does not say it


def _tracked_files() -> list[str]:
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True, text=True)
    return [name for name in listing.stdout.split("\0") if name]


def test_no_file_uses_the_old_name() -> None:
    saying_it = []
    for name in _tracked_files():
        path = ROOT / name
        if name == "uv.lock" or not path.is_file():  # the lock file keeps resolution history it does not own
            continue
        if OLD_NAME in name.lower() or OLD_NAME.encode() in path.read_bytes().lower():
            saying_it.append(name)
    assert saying_it == []


def test_every_distribution_ships_the_licence() -> None:
    licence = (ROOT / "LICENSE").read_text()
    assert licence.startswith("MIT License")
    for package in PACKAGES:
        assert (package / "LICENSE").read_text() == licence, package.name
        project = tomllib.loads((package / "pyproject.toml").read_text())["project"]
        assert project["license"] == "MIT"
        assert project["license-files"] == ["LICENSE"]
        assert set(project["urls"]) >= {"Homepage", "Repository", "Issues"}


def test_adapters_pin_the_core_to_their_own_minor_version() -> None:
    core = tomllib.loads((ROOT / "packages/memwoven/pyproject.toml").read_text())["project"]["version"]
    major, minor, _ = core.split(".")
    for package in PACKAGES:
        project = tomllib.loads((package / "pyproject.toml").read_text())["project"]
        if project["name"] == "memwoven":
            continue
        assert project["version"] == core, package.name
        assert f"memwoven>={core},<{major}.{int(minor) + 1}" in project["dependencies"], package.name


def test_every_runtime_dependency_has_an_upper_bound() -> None:
    for package in PACKAGES:
        project = tomllib.loads((package / "pyproject.toml").read_text())["project"]
        requirements = [*project["dependencies"], *itertools.chain(*project.get("optional-dependencies", {}).values())]
        unbounded = [req for req in requirements if not re.search(r"<|==|~=", req)]
        assert unbounded == [], package.name
