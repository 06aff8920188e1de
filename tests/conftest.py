"""Shared fixtures: every test that starts processes must leave none behind."""
from __future__ import annotations

import os
from collections.abc import Iterator

import psutil
import pytest

from chaos.marks import engine_pid, marked_processes, orphaned

pytest_plugins = ["pytester"]


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
