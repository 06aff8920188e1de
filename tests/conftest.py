"""Shared fixtures: every test that starts processes must leave none behind."""
from __future__ import annotations

import os
from collections.abc import Iterator

import psutil
import pytest

from chaos.runtimes.local import engine_pid, marked_processes, orphaned

pytest_plugins = ["pytester"]


def _ours_or_orphaned(proc: psutil.Process) -> bool:
    """Started by this test process's engine, or by an engine that is gone (a leak); not another live run."""
    return engine_pid(proc) == os.getpid() or orphaned(proc)


def network_objects() -> set[str]:
    """torch-chaos namespaces, containers and networks on this machine (empty where there is no engine/root)."""
    from chaos.runtimes.docker import LABEL, DockerUnavailable, client
    from chaos.runtimes.netns import list_namespaces

    found = {f"netns {n}" for n in list_namespaces()} if os.geteuid() == 0 else set()
    try:
        c = client()
    except DockerUnavailable:
        return found
    found |= {f"container {ct['Id']}" for ct in c.api.containers(all=True, filters={"label": LABEL})}
    found |= {f"network {n['Id']}" for n in c.api.networks(filters={"label": LABEL})}
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
