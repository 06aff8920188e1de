"""A crash on docker takes effect when the daemon saw the container die, not when ``docker kill`` returned.

A fake of the SDK's low-level API (a unit-level edge: what the event stream says); the real stream is exercised by
every docker crash of the gate's tour, whose ``fault_injected.t`` now lies before the kill's return."""

from __future__ import annotations

import time
from typing import Any

from chaos.runtimes.docker import DockerRuntime


class _Stream:
    def __init__(self, events: list[dict[str, Any]]):
        self.events, self.closed = events, False

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.events)

    def close(self) -> None:
        self.closed = True


class _Api:
    def __init__(self, events: list[dict[str, Any]] | Exception):
        self.events_out, self.asked, self.stream = events, None, None

    def kill(self, cid: str, signal: str) -> None:
        pass

    def events(self, **kwargs: Any) -> _Stream:
        self.asked = kwargs
        if isinstance(self.events_out, Exception):
            raise self.events_out
        self.stream = _Stream(self.events_out)
        return self.stream


class _Client:
    def __init__(self, api: _Api):
        self.api = api


def _runtime(api: _Api, tmp_path: Any) -> DockerRuntime:
    rt = DockerRuntime("run-20261206-000000-abcdef", tmp_path, image="img")
    rt._client = _Client(api)
    rt._ids["node1"] = "cid1"
    rt._state = lambda name: {"Status": "running"}  # type: ignore[method-assign]
    return rt


def test_the_crash_takes_effect_at_the_daemons_die_event(tmp_path: Any) -> None:
    died = time.time() + 0.03
    api = _Api([{"status": "die", "id": "cid1", "timeNano": int(died * 1e9)}])
    rt = _runtime(api, tmp_path)
    rt.kill("node1")
    assert api.asked["filters"] == {"container": "cid1", "event": "die"}
    assert abs(rt.effect_time("node1") - died) < 1e-6  # type: ignore[operator]
    assert rt.effect_time("node1") is None  # read once per fault
    assert api.stream.closed  # type: ignore[union-attr]


def test_an_older_death_of_the_container_is_not_this_crash(tmp_path: Any) -> None:
    api = _Api([{"status": "die", "id": "cid1", "timeNano": int((time.time() - 30) * 1e9)}])
    rt = _runtime(api, tmp_path)
    rt.kill("node1")
    assert rt.effect_time("node1") is None


def test_without_an_event_stream_the_fault_time_stays_the_calls_return(tmp_path: Any) -> None:
    rt = _runtime(_Api(RuntimeError("events unsupported")), tmp_path)
    assert "docker kill" in rt.kill("node1")
    assert rt.effect_time("node1") is None
