"""Developer tasks. `nox -s tests` is the whole test suite; `nox -s demo` the README's demo.

Every session installs the workspace from the committed lock file (`uv sync --locked`) into its own
virtual environment, with the workspace packages editable.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nox

nox.needs_version = ">=2024.3.2"
nox.options.default_venv_backend = "uv"
nox.options.sessions = ["lint", "typecheck", "tests"]

SOURCES = [
    "packages/memwoven/src",
    "packages/langchain-memwoven/src",
    "packages/langgraph-checkpoint-memwoven/src",
    "packages/llama-index-memwoven/src",
]
DISTRIBUTIONS = ["memwoven", "langchain-memwoven", "langgraph-checkpoint-memwoven", "llama-index-memwoven"]
DIST = Path("dist")
# The workspace distributions a distribution depends on besides memwoven (none of them is on PyPI yet).
LOCAL_DEPENDENCIES = {"langgraph-checkpoint-memwoven": ["langchain-memwoven"]}

# What `nox -s wheels` installs from the built wheels, each alone in a fresh environment, and the check it then
# runs (tests/wheels/smoke.py): the core alone, the core with each extra alone, each adapter.
WHEEL_INSTALLS = {
    "memwoven": "core",
    "memwoven[postgres]": "postgres",
    "memwoven[mysql]": "mysql",
    "memwoven[redis]": "redis",
    "memwoven[qdrant]": "qdrant",
    "memwoven[cli]": "cli",
    "memwoven[encryption]": "encryption",
    "memwoven[simd]": "simd",
    "memwoven[testing]": "testing",
    "langchain-memwoven": "langchain",
    "langgraph-checkpoint-memwoven": "langgraph",
    "llama-index-memwoven": "llama-index",
}


def install(session: nox.Session, *groups: str, compile_bytecode: bool = False) -> None:
    """Install the locked workspace (all packages, all extras) plus dependency groups into the session;
    `compile_bytecode` also writes every installed module's and the workspace sources' `.pyc` files."""
    session.run_install(
        "uv",
        "sync",
        "--locked",
        "--all-packages",
        "--all-extras",
        "--no-default-groups",
        *(f"--group={group}" for group in groups),
        *(["--compile-bytecode"] if compile_bytecode else []),
        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
        external=True,
    )
    if compile_bytecode:  # the workspace packages are installed editable: uv compiles site-packages only
        session.run("python", "-m", "compileall", "-q", *SOURCES)


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


@nox.session(venv_backend="none")
def build(session: nox.Session) -> None:
    """Build every distribution's wheel and sdist into dist/."""
    shutil.rmtree(DIST, ignore_errors=True)
    for distribution in DISTRIBUTIONS:
        session.run("uv", "build", "--quiet", f"--package={distribution}", f"--out-dir={DIST}", external=True)


@nox.session(requires=["build"])
@nox.parametrize("target", list(WHEEL_INSTALLS))
def wheels(session: nox.Session, target: str) -> None:
    """Install one distribution (with one extra) from the built wheels into a fresh environment and smoke-test it.

    Only what the wheel declares is installed (from PyPI); the core comes from dist/ since it is not published.
    """
    built = {wheel.name.split("-")[0].replace("_", "-"): wheel.resolve() for wheel in DIST.glob("*.whl")}
    name, _, extra = target.partition("[")
    requirements = [f"{name}{'[' + extra if extra else ''} @ {built[name].as_uri()}"]
    if name != "memwoven":
        requirements.append(f"memwoven @ {built['memwoven'].as_uri()}")
    requirements += [f"{local} @ {built[local].as_uri()}" for local in LOCAL_DEPENDENCIES.get(name, [])]
    session.install(*requirements)
    smoke = Path("tests/wheels/smoke.py").resolve()
    session.chdir(session.create_tmp())  # away from the sources: only the installed wheel can be imported
    session.run("python", str(smoke), WHEEL_INSTALLS[target])


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks against the peer libraries, side by side in one run (`-- --quick` for a smoke run).

    Bytecode is compiled at install, as pip does: a new process's start-up is measured as a deployment sees it,
    not with every import compiled from source (which PYTHONDONTWRITEBYTECODE would make of each spawn)."""
    install(session, "bench", "pgvector-peers", compile_bytecode=True)
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
