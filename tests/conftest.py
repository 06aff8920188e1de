"""Shared fixtures: every test that starts processes must leave none behind; one golden cache per session; the
fast tier alone runs on all xdist workers, a session with real-cluster tests runs one test at a time."""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import psutil
import pytest

from chaos.runtimes.local import engine_pid, marked_processes, orphaned

pytest_plugins = ["pytester"]

GOLDEN_CACHE_ENV = "TORCH_CHAOS_GOLDEN_CACHE"
_created_golden_cache: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """One golden cache directory per pytest session, shared by every test and xdist worker.

    Set in the controller before xdist starts its workers, which inherit the environment, so each distinct golden
    run (keyed by content, see chaos/golden.py) is computed once per session whatever the tests' out dirs. A cache
    the caller chose (the variable already set) is used as it is and kept."""
    if hasattr(config, "workerinput") or os.environ.get(GOLDEN_CACHE_ENV):
        return
    path = tempfile.mkdtemp(prefix="torch-chaos-golden-")
    os.environ[GOLDEN_CACHE_ENV] = path
    _created_golden_cache.append(path)


def pytest_unconfigure(config: pytest.Config) -> None:
    for path in _created_golden_cache:
        shutil.rmtree(path, ignore_errors=True)
        os.environ.pop(GOLDEN_CACHE_ENV, None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With real-cluster tests in the session, every test goes to one xdist group: all run one after another.

    Integration tests measure recovery times, slowdowns and delays on a 2-core machine; a second cluster, or a
    fast-tier toy job, beside them would distort what they assert (and some fast-tier tests have second-scale
    deadlines of their own, which failed beside a cluster when tried). Without them (``-m "not integration"``)
    the fast tier is spread over the xdist workers. Without xdist (``-n 0``) the mark does nothing."""
    if any(item.get_closest_marker("integration") for item in items):
        for item in items:
            item.add_marker(pytest.mark.xdist_group("serial"))


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


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    before = {p.pid for p in marked_processes(None)}
    objects_before = network_objects()
    yield
    left = [p for p in marked_processes(None) if p.pid not in before and _ours_or_orphaned(p)]
    assert not left, f"processes left behind: {[(p.pid, p.name()) for p in left]}"
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
