"""Shared fixtures: every test that starts processes must leave none behind; one golden cache per session; how
tests share the machine over the xdist workers (two real clusters at once at most; tests that compare the
machine's global state alone)."""
from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from chaos.marks import engine_pid, marked_processes, orphaned
from tests.tiers import set_full_run

pytest_plugins = ["pytester"]

GOLDEN_CACHE_ENV = "TORCH_CHAOS_GOLDEN_CACHE"
SHARE_LOCK_ENV = "TORCH_CHAOS_TEST_SHARE_LOCK"
MACHINE_LOCK_ENV = "TORCH_CHAOS_MACHINE_LOCK"
NO_RERUN_ENV = "TORCH_CHAOS_NO_RERUN"
TIMES_ENV = "TORCH_CHAOS_SUITE_TIMES"  # write every real-cluster test's machine time there (JSON)
# How many real clusters may run at once (default 1: alone). More is an experiment on the suite's length, not a
# way to run it: clusters side by side disturb each other's measured timings (docs/design.md, "Test tiers"). With
# TORCH_CHAOS_MACHINE_LOCK set, every cluster also takes that one lock, which makes it one lane again.
LANES_ENV = "TORCH_CHAOS_CLUSTER_LANES"
BYTECODE_ENV = "PYTHONDONTWRITEBYTECODE"
RUNS_ENV = "TORCH_CHAOS_TEST_RUNS"  # where the session's shared real runs go (tests/runs.py)
_created: dict[str, str] = {}  # env variable -> the path this session made for it
_removed: dict[str, str] = {}  # env variable -> the value this session took away for its run
_session_has_clusters = pytest.StashKey[bool]()


def pytest_configure(config: pytest.Config) -> None:
    """One golden cache directory per pytest session, shared by every test and xdist worker.

    Set in the controller before xdist starts its workers, which inherit the environment, so each distinct golden
    run (keyed by content, see chaos/golden.py) is computed once per session whatever the tests' out dirs. A cache
    the caller chose (the variable already set) is used as it is and kept."""
    set_full_run(full_matrix(config))  # in every worker too: how deep the property-based tests go (tests/tiers.py)
    if hasattr(config, "workerinput"):
        return
    _session_started[:] = [time.monotonic()]
    _cluster_lanes()  # a bad value stops the session here, once, not in every real-cluster test
    _write_bytecode()
    if not os.environ.get(GOLDEN_CACHE_ENV):
        _created[GOLDEN_CACHE_ENV] = os.environ[GOLDEN_CACHE_ENV] = tempfile.mkdtemp(prefix="torch-chaos-golden-")
    if not os.environ.get(RUNS_ENV):  # removed at the end unless a test failed or was run again (then kept to read)
        _created[RUNS_ENV] = os.environ[RUNS_ENV] = tempfile.mkdtemp(prefix="torch-chaos-tests-")
    fd, lock = tempfile.mkstemp(prefix="torch-chaos-share-")
    os.close(fd)
    _created[SHARE_LOCK_ENV] = os.environ[SHARE_LOCK_ENV] = lock


def _write_bytecode() -> None:
    """Let the session's interpreters cache bytecode (``__pycache__``, git-ignored) even where the machine sets
    ``PYTHONDONTWRITEBYTECODE``, as this one does.

    Without it every xdist worker compiles ``chaos`` and pytest rewrites every test module anew (collection ~9 s
    against ~4 s with the caches), and so does each of the suite's few hundred CLI, engine and inner-pytest
    processes. Set in the controller before xdist starts its workers, which inherit the environment, like the
    golden cache; the variable is put back at the end (``pytest_unconfigure``)."""
    value = os.environ.pop(BYTECODE_ENV, None)
    if value is not None:
        _removed[BYTECODE_ENV] = value
        sys.dont_write_bytecode = False


def pytest_unconfigure(config: pytest.Config) -> None:
    for variable, path in _created.items():
        for lane in Path(path).parent.glob(f"{Path(path).name}.lane*") if variable == SHARE_LOCK_ENV else ():
            lane.unlink(missing_ok=True)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.exists(path):
            os.unlink(path)
        os.environ.pop(variable, None)
    _created.clear()
    os.environ.update(_removed)
    _removed.clear()


INTEGRATION_DIR = Path(__file__).resolve().parent / "integration"
FAST_TIER_WORKERS = 3


def _fast_tier(config: pytest.Config) -> bool:
    return "".join(config.getoption("markexpr", "").split()) == "notintegration"


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The fast tier (exactly ``-m "not integration"``) runs three xdist workers, not the default two, unless the
    command line names ``-n`` itself.

    Its tests wait more than they compute (toy jobs that sleep, timeouts run out, pytest and CLI subprocesses): on
    2 cores two workers kept the machine ~56 % busy and took ~60 s, three take ~47 s (both measured on 809 tests,
    docs/design.md, "Test tiers"). The whole suite keeps two: its real clusters run alone, and its fast tests run
    between them. Runs before xdist's own hook of the same name, which turns the worker count into processes."""
    if not _fast_tier(config) or getattr(config.option, "numprocesses", None) != 2:
        return
    given = config.invocation_params.args
    if any(arg == "-n" or arg.startswith(("-n", "--numprocesses")) for arg in given):
        return
    config.option.numprocesses = FAST_TIER_WORKERS


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The fast tier (``-m "not integration"``) does not import tests/integration at all.

    Every module there is marked ``integration`` as a whole (``tests/test_suite_coverage.py`` checks it), so
    ``-m "not integration"`` would deselect every test in it after importing it: ~20 modules imported and
    assertion-rewritten for nothing in each xdist worker. Any other ``-m`` collects them as before."""
    if not _fast_tier(config):
        return None
    path = collection_path.resolve()
    return True if path == INTEGRATION_DIR or INTEGRATION_DIR in path.parents else None


# Files whose tests share real runs with another file's (tests/runs.py caches them per process): same worker.
SHARES_RUNS_WITH = {"test_reports.py": "test_shipped_scenarios.py", "test_compare.py": "test_shipped_scenarios.py",
                    "test_planted_bugs.py": "test_shipped_scenarios.py",
                    "test_recordings_reproduce.py": "test_shipped_scenarios.py"}


def _group(item: pytest.Item) -> str:
    """The xdist group of a real-cluster test: its file (with the files it shares runs with), split by runtime
    where a file is parametrized over runtimes (each (scenario, runtime) run is its own)."""
    module = item.path.name
    group = SHARES_RUNS_WITH.get(module, module)
    callspec = getattr(item, "callspec", None)
    runtime = callspec.params.get("runtime") if callspec is not None else None
    return f"{group}-{runtime}" if runtime else group


FULL_OPTION = "--full"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(FULL_OPTION, action="store_true", default=False,
                     help="run the whole matrix: also the tests marked `full`, which the gate (a plain `python -m "
                          "pytest`) leaves out (docs/testing.md)")


def full_matrix(config: pytest.Config) -> bool:
    return bool(config.getoption(FULL_OPTION, default=False))


def _leave_out_the_full_matrix(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without ``--full``, tests marked ``full`` are deselected (not skipped): the gate's summary counts only what it
    ran, and ``--collect-only --full`` counts the whole matrix. Which tests are ``full`` is said in the test files."""
    if full_matrix(config):
        return
    left_out = [item for item in items if item.get_closest_marker("full")]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if not item.get_closest_marker("full")]


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its own hook of this name)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The gate leaves out the tests marked ``full``; real-cluster tests: one xdist group per file (per runtime in
    the matrix), so runs they share stay cached."""
    _leave_out_the_full_matrix(config, items)
    for item in items:
        if item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.xdist_group(_group(item)))
            if os.environ.get(NO_RERUN_ENV) != "1" and not item.get_closest_marker("flaky"):
                # One rerun for a failed real-cluster test (timing on 2 shared cores): never silent, the session
                # ends with the list of tests that passed only on a rerun, each with its first failure. A test whose
                # point is repetition says flaky(reruns=0) itself.
                item.add_marker(pytest.mark.flaky(reruns=1))


_runs_used = pytest.StashKey[set[str]]()


def _shared_runs() -> Any:
    """tests/runs.py when a test of this session has imported it (only real-cluster tests do), else None."""
    return sys.modules.get("tests.runs")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A rerun (pytest-rerunfailures' execution_count > 1) makes the shared runs its test used afresh: handing it
    the cached run it failed on would fail it again whatever the cause, a flake included."""
    runs = _shared_runs()
    if runs is None:
        return
    if getattr(item, "execution_count", 1) > 1:
        runs.forget(item.stash.get(_runs_used, set()))
    runs.USED_BY_CURRENT_TEST.clear()


def pytest_runtest_teardown(item: pytest.Item) -> None:
    runs = _shared_runs()
    if runs is not None:
        item.stash[_runs_used] = item.stash.get(_runs_used, set()) | runs.USED_BY_CURRENT_TEST


def pytest_collection_finish(session: pytest.Session) -> None:
    """Whether this session runs real clusters at all (after ``-m`` has deselected what it deselects)."""
    session.config.stash[_session_has_clusters] = any(i.get_closest_marker("integration") for i in session.items)
    if hasattr(session.config, "workerinput"):
        _freeze_what_collection_made()


def _freeze_what_collection_made() -> None:
    """Move everything an xdist worker holds after importing and collecting (chaos, pytest, its plugins, the test
    modules) out of the cyclic garbage collector's reach: those objects live until the worker exits, yet every full
    collection during the tests would walk them again. Only collection is skipped: reference counting still frees
    what is dropped, and what the tests allocate is collected as ever."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Collect the tests' garbage once, then freeze what is left before pytest's own end: its unraisable-exception
    check runs ``gc.collect()`` five times at unconfigure and the interpreter once more at exit, each walking every
    object the session ever imported (torch and matplotlib included, in the workers that imported them): ~0.9 of a
    worker's CPU-s after its last test against ~0.2 with the freeze (measured, issue 30). The one collection here
    still runs the finalizers of the tests' garbage while pytest's unraisable hook listens, so what that check
    reports is unchanged; garbage made after the freeze is collected as ever."""
    gc.collect()
    gc.freeze()


def _share_lock(config: pytest.Config) -> str | None:
    """The session's lock file, when this is an xdist worker of a session with real-cluster tests."""
    path = os.environ.get(SHARE_LOCK_ENV)
    if path is None or not hasattr(config, "workerinput") or not config.stash.get(_session_has_clusters, False):
        return None
    return path


@contextmanager
def _locked(path: str, mode: int) -> Iterator[None]:
    with open(path, "a") as lock:
        fcntl.flock(lock, mode)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def _share_the_machine(request: pytest.FixtureRequest) -> Iterator[None]:
    """One real cluster at a time, alone on the machine; fast-tier tests in parallel with each other only
    (``TORCH_CHAOS_CLUSTER_LANES`` > 1, an experiment: that many clusters at once, fast tests beside them).

    Real-cluster tests hold the session's lock exclusively, fast-tier tests share it. Two clusters side by side
    on 2 cores looked affordable in a quiet measurement (quickstart's recovery_s 11.2 s beside a network-delay run
    against 9.2 s alone), but in a whole-suite run they pushed measured recoveries past their documented bounds
    (docker elastic-freeze 47.5 s against 45 s, a quickstart 25.6 s against 30 s): a verdict on timing must not
    depend on what the suite runs beside it. Files marked ``alone`` hold the lock for the whole file
    (``_alone_module``)."""
    path = _share_lock(request.config)
    if path is None:
        yield
        return
    cluster = request.node.get_closest_marker("integration") is not None
    with contextlib.ExitStack() as locks:
        if not request.node.get_closest_marker("alone"):  # else its module holds the machine already
            lanes = _cluster_lanes()
            if cluster and lanes > 1:  # the experiment: a lane each, fast tests beside them
                locks.enter_context(_locked(path, fcntl.LOCK_SH))
                locks.enter_context(_lane(path, lanes))
            else:
                locks.enter_context(_locked(path, fcntl.LOCK_EX if cluster else fcntl.LOCK_SH))
            locks.enter_context(_machine_lock(cluster))
        held, cpu = time.monotonic(), psutil.cpu_times()
        yield
        if cluster:
            request.node.user_properties.append((MACHINE_TIME, (time.monotonic() - held, _busy_since(cpu))))


def _cluster_lanes() -> int:
    value = os.environ.get(LANES_ENV, "1")
    try:
        lanes = int(value)
    except ValueError:
        lanes = 0
    if lanes < 1:
        raise pytest.UsageError(f"{LANES_ENV}={value!r}: expected a whole number of lanes, 1 or more")
    return lanes


@contextmanager
def _lane(share_lock: str, lanes: int) -> Iterator[None]:
    """One of ``lanes`` lock files beside the share lock: the first free one, else wait on this worker's own."""
    paths = [f"{share_lock}.lane{i}" for i in range(lanes)]
    for lane in paths:
        with open(lane, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
            return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    with _locked(paths[int(worker) % lanes if worker.isdigit() else 0], fcntl.LOCK_EX):
        yield


def _busy_since(before: Any) -> float:  # psutil.cpu_times(): a platform-specific named tuple
    """The share of the machine's CPU time that was busy since ``before`` (all cores; 1.0 = every core busy).

    What a real-cluster test leaves idle while it holds the machine alone is the most a second lane of
    measurement-free runs beside it could use (docs/design.md, "Test tiers")."""
    after = psutil.cpu_times()
    idle = (after.idle - before.idle) + (getattr(after, "iowait", 0.0) - getattr(before, "iowait", 0.0))
    total = sum(after) - sum(before)
    return 1.0 - idle / total if total > 0 else 0.0


TOP = 10  # the summary lists this many of the longest real-cluster tests
_session_started: list[float] = []  # the controller's clock when the session began (the summary's wall time)
MACHINE_TIME = "machine_s"  # a real-cluster test's (time holding the machine, busy share), lock waits excluded
_machine_times: list[tuple[float, str, float]] = []  # (seconds, node id, busy share)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect each real-cluster test's machine time (xdist hands the workers' reports to the controller)."""
    if report.when == "teardown":
        # a rerun's report carries the item's properties of every attempt so far: its own is the last
        times = [value for name, value in report.user_properties if name == MACHINE_TIME]
        if times:
            seconds, busy = times[-1]
            _machine_times.append((seconds, report.nodeid, busy))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Where the suite's minutes go (issue 12): real-cluster tests in order of the time they held the machine.
    pytest's own ``--durations`` counts a test's wait for the lock as its setup, which hides the answer."""
    if hasattr(terminalreporter.config, "workerinput"):
        return
    reruns = terminalreporter.stats.get("rerun", [])
    golden = _created.get(GOLDEN_CACHE_ENV)
    if (reruns or terminalreporter.stats.get("failed")) and golden and any(Path(golden).iterdir()):
        # a failure or a flake may lie in a golden or control run (a fault-free run that hung): keep them to read
        kept = _created.pop(GOLDEN_CACHE_ENV)
        os.environ.pop(GOLDEN_CACHE_ENV, None)  # the workers are done: nothing reads it any more
        terminalreporter.write_line(f"golden and control runs of this session kept (a test failed): {kept}")
    runs = _created.get(RUNS_ENV)
    if (reruns or terminalreporter.stats.get("failed")) and runs and any(Path(runs).iterdir()):
        kept = _created.pop(RUNS_ENV)
        os.environ.pop(RUNS_ENV, None)
        terminalreporter.write_line(f"the real runs this session's tests shared kept (a test failed): {kept}")
    if reruns:
        terminalreporter.write_sep("=", f"{len(reruns)} real-cluster test(s) failed and were run again "
                                        f"(each is a flake or a bug to look into; {NO_RERUN_ENV}=1 turns reruns off)",
                                   yellow=True, bold=True)
        for report in reruns:
            first = next((line for line in str(report.longrepr).splitlines() if line.startswith("E ")), "")
            terminalreporter.write_line(f"  {report.nodeid}: {first[:300]}")
    if not _machine_times:
        return
    total = sum(t for t, _, _ in _machine_times)
    idle = sum(t * (1.0 - busy) for t, _, busy in _machine_times)
    tier = "the whole matrix (--full)" if full_matrix(terminalreporter.config) else "the gate"
    wall = time.monotonic() - _session_started[0] if _session_started else 0.0
    terminalreporter.write_sep("=", f"{tier}: {wall / 60:.1f} min wall; {len(_machine_times)} real-cluster tests held "
                                    f"the machine {total / 60:.1f} min, its CPU {1 - idle / total:.0%} busy (idle: "
                                    f"{idle / 60:.1f} min of the whole machine)")
    terminalreporter.write_line(f"the {min(TOP, len(_machine_times))} longest real-cluster tests (machine time, "
                                "lock waits excluded):")
    for seconds, nodeid, busy in sorted(_machine_times, reverse=True)[:TOP]:
        terminalreporter.write_line(f"{seconds:7.1f}s {busy:4.0%} busy  {nodeid}")
    if os.environ.get(TIMES_ENV):  # every test's figures, for the suite's budget (docs/design.md, "Test tiers")
        Path(os.environ[TIMES_ENV]).write_text(json.dumps(sorted(_machine_times, reverse=True), indent=0))


@contextmanager
def _machine_lock(cluster: bool) -> Iterator[None]:
    """With ``TORCH_CHAOS_MACHINE_LOCK=PATH``: each real-cluster test also holds that lock file, so clusters of
    other processes on the machine that take it (``flock PATH pytest ...``, benchmarks) run between this session's
    tests instead of beside them. Off by default: a session started under ``flock PATH`` itself would wait on its
    own launcher."""
    path = os.environ.get(MACHINE_LOCK_ENV)
    if not cluster or not path:
        yield
        return
    with _locked(path, fcntl.LOCK_EX):
        yield


@pytest.fixture(scope="module", autouse=True)
def _alone_module(request: pytest.FixtureRequest) -> Iterator[None]:
    path = _share_lock(request.config)
    marks = getattr(request.module, "pytestmark", [])
    marked = any(m.name == "alone" for m in (marks if isinstance(marks, list) else [marks]))
    if path is None or not marked:
        yield
        return
    with _locked(path, fcntl.LOCK_EX), _machine_lock(True):
        yield


def _described(proc: psutil.Process) -> str:
    """What a leftover is, for the failure message: a flaky leftover is otherwise a pid and 'python'."""
    try:
        env = proc.environ()
        return (f"pid {proc.pid} ({proc.status()}, parent {proc.ppid()}): {' '.join(proc.cmdline())[:200]}; "
                f"CHAOS_TREE={env.get('CHAOS_TREE')} CHAOS_ENGINE_PID={env.get('CHAOS_ENGINE_PID')}")
    except psutil.Error as exc:
        return f"pid {proc.pid} ({type(exc).__name__})"


def _ours_or_orphaned(proc: psutil.Process) -> bool:
    """Started by this test process's engine, or by an engine that is gone (a leak); not another live run."""
    return engine_pid(proc) == os.getpid() or orphaned(proc)


def network_objects() -> set[str]:
    """torch-chaos namespaces, containers and networks of this process's runs or of dead engines (a leak).

    Objects of another live engine (a run in a second terminal, another xdist worker) are not ours to judge."""
    import json

    from chaos.runtimes.docker import ENGINE_LABEL, LABEL, DockerUnavailable, client
    from chaos.runtimes.netns import OWNERS_DIR, list_namespaces

    def ours_or_dead(pid: str) -> bool:
        return not pid.isdigit() or int(pid) == os.getpid() or not psutil.pid_exists(int(pid))

    found = set()
    if os.geteuid() == 0:
        for ns in list_namespaces():
            try:
                owner = json.loads((OWNERS_DIR / f"{'-'.join(ns.split('-')[:2])}.json").read_text())
            except (OSError, ValueError):
                owner = {}
            if ours_or_dead(str(owner.get("engine_pid", ""))):
                found.add(f"netns {ns}")
    found |= storage_mounts(ours_or_dead)
    try:
        c = client()
    except DockerUnavailable:
        return found
    for ct in c.api.containers(all=True, filters={"label": LABEL}):
        if ours_or_dead((ct.get("Labels") or {}).get(ENGINE_LABEL, "")):
            found.add(f"container {ct['Id']}")
    for n in c.api.networks(filters={"label": LABEL}):
        if ours_or_dead((n.get("Labels") or {}).get(ENGINE_LABEL, "")):
            found.add(f"network {n['Id']}")
    return found


def storage_mounts(ours_or_dead: Callable[[str], bool]) -> set[str]:
    """The storage layer's FUSE mounts whose engine is this process or dead, or that nobody serves any more.

    A mount served by an unmarked server (the storage unit tests' own, in another pytest session on this machine)
    is that test's to check."""
    from chaos.marks import ENGINE_VAR, TREE_VAR, parse_engine_mark
    from chaos.storage.layer import MARK_PREFIX
    from chaos.storage.mounts import chaos_mounts, served

    engines: dict[str, str] = {}
    for p in marked_processes(MARK_PREFIX):
        try:
            env = p.environ()
        except (psutil.Error, OSError):
            continue
        pid, here = parse_engine_mark(env.get(ENGINE_VAR, ""))
        # an engine of another pid namespace: its mount is not ours to judge (an empty pid would say "leaked")
        engines[env.get(TREE_VAR, "").removeprefix(MARK_PREFIX + "/")] = str(pid or "") if here else "foreign"
    found = set()
    for m in chaos_mounts():
        if engines.get(m.run_id) == "foreign":
            continue
        leaked = ours_or_dead(engines[m.run_id]) if m.run_id in engines else not served(m.path)
        if leaked:
            found.add(f"storage mount {m.path}")
    return found


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    before = {p.pid for p in marked_processes(None)}
    objects_before = network_objects()
    yield
    left = [p for p in marked_processes(None) if p.pid not in before and _ours_or_orphaned(p)]
    assert not left, f"processes left behind (this test process is {os.getpid()}): {[_described(p) for p in left]}"
    new_objects = network_objects() - objects_before
    assert not new_objects, f"left behind: {sorted(new_objects)}"


@pytest.fixture
def machine_for() -> object:
    """Skip (locally) or fail (CI=true) when this machine lacks what a scenario needs: CI must run them for real."""
    from chaos.doctor import advice, unmet

    def check(scenario: object) -> None:
        problems = unmet(scenario)  # type: ignore[arg-type]
        if problems:
            message = advice(problems)
            if os.environ.get("CI") == "true":
                pytest.fail(message)
            pytest.skip(message)

    return check


# The xdist group of every test that reads ``recorded_comparison`` or ``recorded_report``: one worker draws each
# of them once, instead of every worker (and every module) drawing its own.
RECORDED_REPORTS_GROUP = "recorded-reports"


@pytest.fixture(scope="session")
def recorded_comparison(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``chaos compare`` of the recorded centralized-crash and quickstart runs, drawn once per process (~1 CPU-s:
    three plots and a report per run), for the tests that only read it (tests/test_compare_views.py,
    tests/test_recorded_runs.py)."""
    from chaos.compare import write_comparison
    from tests.data.recorded import expand

    runs = tmp_path_factory.mktemp("compared-runs")
    dirs = [expand(name, runs) for name in ("centralized-crash", "quickstart")]
    return write_comparison(dirs, tmp_path_factory.mktemp("compared-pages") / "cmp")


@pytest.fixture(scope="session")
def recorded_report(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Path]:
    """``recorded_report(name, fmt)``: the report a plain ``chaos report`` writes for the recorded run ``name``
    (tests/data/histories; no MTBF, no projection), written once per process and format from a copy of its run
    directory, for the tests that only read it. An HTML or Markdown report draws two plots (~0.3 CPU-s); the same
    recordings' reports were drawn again by each of tests/test_recorded_runs.py, test_report_views.py and
    test_resume_noise.py."""
    from chaos.reports import write_report
    from tests.data.recorded import expand

    into = tmp_path_factory.mktemp("recorded-reports")
    made: dict[tuple[str, str], Path] = {}

    def report(name: str, fmt: str) -> Path:
        if (name, fmt) not in made:
            run_dir = into / name if (into / name).is_dir() else expand(name, into)
            made[name, fmt] = write_report(run_dir, fmt)
        return made[name, fmt]

    return report


@pytest.fixture(scope="session")
def chromium_views(recorded_report: Callable[[str, str], Path],
                   recorded_comparison: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What headless Chromium showed of the recorded centralized-crash report (``"report"``) and of the recordings'
    comparison page (``"compare"``), each opened in a page of its own: the URLs it requested and failed, each
    plot's box and path count, the legend's rows, the banner, and (the report) a full-page screenshot.

    One browser for both (tests/test_recorded_runs.py and tests/test_compare_views.py read it, in one xdist group):
    a launch of the driver and Chromium costs ~1.5 CPU-s, and each test launched its own. The browser is closed
    before any test reads what it saw. Chromium missing: skipped, failed under ``CI=true``, as before."""
    from tests.browser import CHROMIUM, launch

    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (apt-get install -y chromium); CI must run the browser test")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    pages = {"report": recorded_report("centralized-crash", "html"), "compare": recorded_comparison["html"]}
    shots = tmp_path_factory.mktemp("chromium")
    views: dict[str, Any] = {}
    with sync_playwright() as p:
        browser = launch(p)
        try:
            for name, path in pages.items():
                page = browser.new_page(viewport={"width": 1200, "height": 900}, java_script_enabled=False)
                view: dict[str, Any] = {"uri": path.as_uri(), "requests": [], "failed": []}
                page.on("request", lambda r, v=view: v["requests"].append(r.url))
                page.on("requestfailed", lambda r, v=view: v["failed"].append(r.url))
                page.goto(path.as_uri())
                plots = page.locator("figure svg")
                view["plot_boxes"] = [plots.nth(i).bounding_box() for i in range(plots.count())]
                view["plot_paths"] = [plots.nth(i).locator("path").count() for i in range(plots.count())]
                view["legend_rows"] = page.locator("#legend tbody tr").count()
                banner = page.locator(".banner")
                view["banner"] = banner.inner_text() if banner.count() else None
                if name == "report":
                    view["screenshot"] = shots / "report-screenshot.png"
                    page.screenshot(path=str(view["screenshot"]), full_page=True)
                page.close()
                views[name] = view
        finally:
            browser.close()
    return views
