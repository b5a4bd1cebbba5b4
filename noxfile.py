"""Test and lint sessions for every package of the monorepo (run `nox`, or `nox -l` to list them).

- ``lint``: ruff check and ruff format --check over packages/, examples/, benchmarks/, tools/ and this file
  (settings in ruff.toml);
- ``structure``: no Python file over 600 lines, no import cycle in any package (tools/structure.py;
  deferred imports inside functions are reported, not failed on);
- ``tests(package=...)``: one session per ``packages/*`` with a pyproject: flow-core, then the
  package with its ``test`` extra (and the packages of this repository that it or that extra names,
  from their folders: flow-models' tests use flow-amp), then its ``tests/`` with pytest;
- ``all_plugins``: every package and example plugin installed together, and flow-core's tests and
  every package's tests run again, so a plugin that breaks the core (or another plugin) shows up;
- ``dist``: flow-dist's multi-process tests, with MPI (mpi4py on the ``mpich`` wheel): each runs a
  script of ``packages/flow-dist/tests/ranks`` under ``mpiexec`` at 2, 3 or 4 ranks (the
  ``tests`` sessions have no MPI, so there those tests skip and the single-process ones run),
  and flow-train's ``--nproc`` test;
- ``ecosystem``: the tools' tests (ONNX export, TensorBoard, DLPack, profiler, the graph as a picture,
  and flow-train's options for them) with their optional dependencies installed (flow-core's
  ``onnx`` and ``tensorboard`` extras); elsewhere those tests skip;
- ``parity``: every package's tests that compare with PyTorch (the files that mention torch), with
  torch==2.13.0 installed by pip; a test skipped there for want of torch fails. The other sessions
  stay torch-free, since flow never needs it.

flow-core compiles a C++ extension, so it is installed non-editable in each session, from one
wheel built per change of its sources: the wheel is kept in ``.nox/_wheels/`` under a hash of
flow-core's files, and sessions (and later runs) reuse it instead of compiling again.
"""

from __future__ import annotations

import functools
import hashlib
import re
import shutil
import sys
import time
from pathlib import Path

import nox

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

nox.needs_version = ">=2024.4.15"  # for "uv|virtualenv"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "structure", "tests", "all_plugins", "dist", "parity", "ecosystem"]

ROOT = Path(__file__).parent
CORE = "flow-core"
CORE_DIR = ROOT / "packages" / CORE
# flow-core first: its session builds the wheel the others reuse, and its failures explain theirs.
PACKAGES = sorted(
    (p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file()),
    key=lambda name: (name != CORE, name),
)
EXAMPLE_PLUGINS = sorted(p for p in (ROOT / "examples").glob("*") if (p / "pyproject.toml").is_file())
WHEEL_CACHE = ROOT / ".nox" / "_wheels"
LINT_PATHS = ("packages", "examples", "benchmarks", "tools", "noxfile.py")
RUFF = "ruff==0.17.6"  # pinned so that a new ruff release cannot turn CI red on its own

PYTEST_NO_TESTS_COLLECTED = 5
BUILD_OUTPUTS = {"__pycache__", "build", "dist", "_skbuild"}


def has_extra(project_dir: Path, extra: str) -> bool:
    with open(project_dir / "pyproject.toml", "rb") as f:
        project = tomllib.load(f).get("project", {})
    return extra in project.get("optional-dependencies", {})


def requirement(project_dir: Path, extra: str = "test") -> str:
    """A pip requirement for a local project, with ``extra`` when the project declares it."""
    path = f"./{project_dir.relative_to(ROOT).as_posix()}"
    return f"{path}[{extra}]" if has_extra(project_dir, extra) else path


def local_dependencies(project_dir: Path, extra: str = "test") -> list[Path]:
    """The folders of this repository's packages other than flow-core that a project requires, itself or
    through ``extra``. They are not on the package index: a session installs them by path alongside
    the project (a requirement by path satisfies the name, as the core's wheel satisfies ``flow-core``)."""
    with open(project_dir / "pyproject.toml", "rb") as f:
        project = tomllib.load(f).get("project", {})
    reqs = [*project.get("dependencies", []), *project.get("optional-dependencies", {}).get(extra, [])]
    names = {re.split(r"[\s\[<>=!~;@]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}
    return [ROOT / "packages" / p for p in PACKAGES if p != CORE and p in names]


def is_wheel_source(rel: Path) -> bool:
    """Whether a file of flow-core (``rel`` to its folder) can change its wheel: not its tests, build
    outputs, or hidden folders (tool caches such as .pytest_cache, .hypothesis that running tests leaves)."""
    return not (
        rel.parts[0] == "tests"
        or rel.suffix in (".so", ".pyc", ".pyd")
        or any(p in BUILD_OUTPUTS or p.startswith(".") or p.endswith(".egg-info") for p in rel.parts)
    )


@functools.cache  # once per nox run, so every session tests the same wheel even while sources are edited
def core_sources_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(CORE_DIR.rglob("*")):
        rel = path.relative_to(CORE_DIR)
        if path.is_file() and is_wheel_source(rel):
            digest.update(rel.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def core_wheel(session: nox.Session) -> Path:
    """flow-core's wheel for this Python, built (in ``session``) once per change of its sources."""
    key = f"{CORE}-py{sys.version_info.major}{sys.version_info.minor}-{core_sources_hash()}"
    out = WHEEL_CACHE / key
    wheels = sorted(out.glob("*.whl"))
    if wheels:
        session.log(f"reusing {wheels[0].relative_to(ROOT)}")
        return wheels[0]
    shutil.rmtree(WHEEL_CACHE, ignore_errors=True)  # wheels of older sources, half-finished builds
    start = time.perf_counter()
    tmp = WHEEL_CACHE / f"_building-{key}"
    if session.venv_backend == "uv":
        session.run(
            "uv",
            "build",
            "--wheel",
            "--out-dir",
            str(tmp),
            "--python",
            f"{session.bin}/python",
            str(CORE_DIR),
            external=True,
        )
    else:
        session.run("python", "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(tmp), str(CORE_DIR))
    tmp.rename(out)  # only a finished build lands under its key
    session.log(f"built the {CORE} wheel in {time.perf_counter() - start:.0f} s")
    return sorted(out.glob("*.whl"))[0]


def core_requirement(session: nox.Session, extra: str = "test") -> str:
    wheel = core_wheel(session)
    extras = f"[{extra}]" if has_extra(CORE_DIR, extra) else ""
    return f"{CORE}{extras} @ {wheel.as_uri()}"


def run_pytest(session: nox.Session, project_dir: Path) -> None:
    """Run a project's tests/ from its own folder (so its pytest settings apply) against the installed code."""
    if not (project_dir / "tests").is_dir():
        session.warn(f"{project_dir.relative_to(ROOT)} has no tests/ folder")
        return
    with session.chdir(project_dir):
        # A package whose tests/ holds no test yet is not a failure (pytest exits 5 then).
        session.run("pytest", "tests", *session.posargs, success_codes=[0, PYTEST_NO_TESTS_COLLECTED])


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole repository."""
    session.install(RUFF)
    paths = [p for p in LINT_PATHS if (ROOT / p).exists()]
    session.run("ruff", "check", *paths)
    session.run("ruff", "format", "--check", *paths)


@nox.session
def structure(session: nox.Session) -> None:
    """Module sizes and import cycles of every package's source (see tools/structure.py)."""
    session.install("pytest")
    session.run("pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tools"))
    session.run("python", str(ROOT / "tools" / "structure.py"), "--deferred")


@nox.session
@nox.parametrize("package", PACKAGES)
def tests(session: nox.Session, package: str) -> None:
    """One package's tests, with only flow-core, that package and the repository packages it names installed."""
    project_dir = ROOT / "packages" / package
    plugin = [] if package == CORE else [requirement(p) for p in (project_dir, *local_dependencies(project_dir))]
    session.install(core_requirement(session), *plugin, "pytest")
    run_pytest(session, project_dir)


@nox.session
def all_plugins(session: nox.Session) -> None:
    """Every package and example plugin installed at once; the core's and every package's tests again."""
    projects = [ROOT / "packages" / p for p in PACKAGES if p != CORE] + EXAMPLE_PLUGINS
    session.install(core_requirement(session), *(requirement(p) for p in projects), "pytest")
    session.run("python", "-m", "flow", "plugins")
    for project_dir in [CORE_DIR, *projects]:
        run_pytest(session, project_dir)


@nox.session
def dist(session: nox.Session) -> None:
    """flow-dist's multi-process tests under mpiexec (MPICH from PyPI, so no system MPI is needed)."""
    project_dir = ROOT / "packages" / "flow-dist"
    models_dir = ROOT / "packages" / "flow-models"
    session.install(
        core_requirement(session),
        f"./{project_dir.relative_to(ROOT).as_posix()}[mpi,test]",
        requirement(models_dir),
        *map(requirement, local_dependencies(models_dir)),
        "pytest",
    )
    session.run("mpiexec", "--version", silent=True)  # fail early, clearly, if MPICH did not install
    with session.chdir(project_dir):
        session.run("pytest", "tests", "-v", *session.posargs)
    with session.chdir(models_dir):  # flow-train --nproc
        session.run("pytest", "tests/test_train_nproc.py", "-v", *session.posargs)


def torch_test_files(project_dir: Path) -> list[str]:
    """The test files of a package that compare with PyTorch (they import it, or skip without it)."""
    tests = project_dir / "tests"
    if not tests.is_dir():
        return []
    return sorted(
        p.relative_to(project_dir).as_posix()
        for p in tests.rglob("test_*.py")
        if "torch" in p.read_text(encoding="utf-8")
    )


@nox.session(venv_backend="virtualenv")  # a virtualenv has pip, which installs torch as this machine's pip config says
def parity(session: nox.Session) -> None:
    """Every test of every package that compares with PyTorch, with torch==2.13.0 (CPU) installed by pip.

    The other sessions run without torch (flow never needs it), where these tests skip; here a test
    skipped because torch is missing fails (``-p flow.testing.require_torch``), so a regression
    against PyTorch's semantics fails CI.
    """
    projects = [ROOT / "packages" / p for p in PACKAGES]
    with_torch = [(p, torch_test_files(p)) for p in projects]
    with_torch = [(p, files) for p, files in with_torch if files]
    dirs = [p for p, _ in with_torch if p != CORE_DIR]
    dirs += sorted({d for p in dirs for d in local_dependencies(p)} - set(dirs))
    plugins = [requirement(p) for p in dirs]
    session.install(core_requirement(session), *plugins, "pytest")
    session.run("python", "-m", "pip", "install", "--quiet", "--only-binary", "torch", "torch==2.13.0")
    for project_dir, files in with_torch:
        with session.chdir(project_dir):
            session.run("pytest", *files, "-p", "flow.testing.require_torch", "-q", *session.posargs)


# The tests of features with optional dependencies, per package: run with those installed.
ECOSYSTEM_TESTS = {
    CORE: (
        "tests/test_onnx_export.py",
        "tests/test_tensorboard.py",
        "tests/test_dlpack.py",
        "tests/test_graph_render.py",
        "tests/test_profiler.py",
    ),
    "flow-models": (
        "tests/test_onnx_zoo.py",
        "tests/test_train_tensorboard.py",
        "tests/test_train_dump_graph.py",
        "tests/test_train_profile.py",
    ),
}
ECOSYSTEM_EXTRAS = "test,onnx,tensorboard"


@nox.session(venv_backend="virtualenv")  # pip, for torch as in parity
def ecosystem(session: nox.Session) -> None:
    """The ecosystem tools' tests with flow-core's ``onnx`` and ``tensorboard`` extras installed (onnx,
    onnxruntime, tensorboard, Pillow), which the other sessions leave out so that they stay lean, and
    torch for the comparisons with its exporter, profiler, SummaryWriter and DLPack. The
    graph-picture tests also need graphviz's ``dot`` (a system package; .ci/run installs it where it
    can, and they skip without it)."""
    models = ROOT / "packages" / "flow-models"
    wheel = core_wheel(session)
    deps = [requirement(d) for d in local_dependencies(models)]
    models_req = f"./{models.relative_to(ROOT).as_posix()}[test,tensorboard]"
    session.install(f"{CORE}[{ECOSYSTEM_EXTRAS}] @ {wheel.as_uri()}", models_req, *deps, "pytest")
    session.run("python", "-m", "pip", "install", "--quiet", "--only-binary", "torch", "torch==2.13.0")
    session.run("python", "-c", "import onnx, onnxruntime, tensorboard, PIL, torch")  # fail early if one is missing
    for package, files in ECOSYSTEM_TESTS.items():
        with session.chdir(ROOT / "packages" / package):
            session.run("pytest", *files, "-q", *session.posargs)
