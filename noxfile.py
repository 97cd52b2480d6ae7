"""Developer tasks. `nox -s tests` is the whole test suite; `nox -s demo` the README's demo.

Every session installs the workspace from the committed lock file (`uv sync --locked`) into its own
virtual environment, with the workspace packages editable.
"""

from __future__ import annotations

from pathlib import Path

import nox

nox.needs_version = ">=2024.3.2"
nox.options.default_venv_backend = "uv"
nox.options.sessions = ["lint", "typecheck", "tests"]

SOURCES = ["packages/memwoven/src", "packages/langchain-memwoven/src", "packages/llama-index-memwoven/src"]


def install(session: nox.Session, *groups: str) -> None:
    """Install the locked workspace (all packages, all extras) plus dependency groups into the session."""
    session.run_install(
        "uv",
        "sync",
        "--locked",
        "--all-packages",
        "--all-extras",
        "--no-default-groups",
        *(f"--group={group}" for group in groups),
        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
        external=True,
    )


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite (service tests need PostgreSQL, MariaDB and Redis; see README)."""
    install(session, "test")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    install(session, "lint")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on every package's sources and on the benchmarks."""
    install(session, "typecheck", "bench")
    session.run("mypy", *SOURCES, "benchmarks")


@nox.session
def demo(session: nox.Session) -> None:
    """`memwoven demo`, the README demo: offline, on a temporary SQLite file (`-- --url sqlite:///demo.db` keeps it)."""
    install(session)
    session.run("memwoven", "demo", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks against the peer libraries, side by side in one run (`-- --quick` for a smoke run)."""
    install(session, "bench")
    session.run("python", "benchmarks/run.py", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site with mkdocs, warnings as errors (into a temporary directory)."""
    install(session, "docs")
    site = Path(session.create_tmp()) / "site"
    quiet = {"NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner about its successor, not about these docs
    session.run("mkdocs", "build", "--strict", "--site-dir", str(site), *session.posargs, env=quiet)
    session.log(f"site built in {site}")


# Vulnerabilities that `nox -s audit` knowingly accepts, each with the reason (none so far).
AUDIT_IGNORED: dict[str, str] = {}


@nox.session
def audit(session: nox.Session) -> None:
    """Known vulnerabilities in every locked dependency (pip-audit against PyPI's advisory data).

    Audits the lock file itself (all packages, extras and groups, for every Python version), not whatever
    happens to be installed; the workspace's own packages are not on PyPI and are left out. `--strict` makes a
    dependency that could not be looked up a failure, so the audit never passes without having looked.
    """
    install(session, "audit")
    requirements = Path(session.create_tmp()) / "locked-requirements.txt"
    session.run(
        "uv",
        "export",
        "--locked",
        "--all-packages",
        "--all-extras",
        "--all-groups",
        "--no-emit-workspace",
        "--format=requirements-txt",
        f"--output-file={requirements}",
        "--quiet",
        external=True,
    )
    session.run(
        "pip-audit",
        f"--requirement={requirements}",
        "--require-hashes",  # pinned and hashed by the lock: nothing to resolve, no pip needed
        "--disable-pip",
        "--vulnerability-service=pypi",
        "--strict",
        "--progress-spinner=off",
        *(f"--ignore-vuln={vulnerability}" for vulnerability in AUDIT_IGNORED),
        *session.posargs,
    )
