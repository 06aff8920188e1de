"""pytest plugin (entry point ``pytest11``): chaos verdicts in the test runner a team already uses.

- the ``chaos`` fixture runs a scenario from a test: ``result = chaos.run("scenarios/quickstart.yaml")``, then
  plain asserts on ``result.verdict``, ``result.checkpoint``, ``result.faults``;
- with ``--chaos-scenarios``, every ``*.chaos.yaml`` file is collected as a test item that fails with the
  verdict table as its message, and records its run directory (and report) as JUnit properties. A verdict
  ``error`` (the test did not happen: a planned fault never fired, the engine failed, the job never started) is a
  pytest *error*, not a failure, as ``chaos run`` exits 3 for it and 1 for a failure: the scenario runs in the
  item's setup, so JUnit writes ``<error>`` for it and ``<failure>`` for a job that broke.

Each pytest-xdist worker writes under its own base temp directory and every run picks free ports and a unique
run id, so parallel workers never clash.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.run_result import RunResult


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torch-chaos")
    group.addoption("--chaos-scenarios", action="store_true", default=False,
                    help="collect *.chaos.yaml files as test items (each one is a real chaos run)")
    group.addoption("--chaos-out", default=None,
                    help="directory for run directories (default: a directory under pytest's basetemp)")


def _out_dir(config: pytest.Config, factory: pytest.TempPathFactory) -> Path:
    option = config.getoption("--chaos-out")
    if option:
        path = Path(option)
        worker = getattr(config, "workerinput", {}).get("workerid")
        return path / worker if worker else path
    return factory.getbasetemp() / "chaos-runs"


class ChaosRunner:
    """The ``chaos`` fixture: runs scenarios and remembers their run directories for the test report."""

    def __init__(self, out_dir: Path, node: pytest.Item):
        self.out_dir = out_dir
        self._node = node
        self.results: list[RunResult] = []

    def run(self, scenario: Any) -> RunResult:
        # lazy: pytest loads this plug-in in every session; the engine only when a test runs one
        from chaos.engine import run

        result = run(scenario, out_dir=self.out_dir)
        self.results.append(result)
        self._node.user_properties.append(("chaos_run_dir", str(result.run_dir)))
        self._node.user_properties.extend(result.figures())  # JUnit properties: every figure, for trends
        _attach_report(self._node, result)
        return result


def _attach_report(node: pytest.Item, result: RunResult) -> None:
    """The run's report.html as a JUnit property. The engine writes it at the end of every run (the same file
    ``write_report(run_dir, "html")`` writes, from the same analysis): drawn here again only where the engine's
    could not be (a report that fails is logged there, never fails the run), so its error is recorded."""
    path = result.run_dir / "report.html"
    if not path.is_file():
        try:
            # lazy: pytest loads this plug-in in every session; the engine only when a test runs one
            from chaos.reports import write_report
        except ImportError:
            return
        try:
            path = write_report(result.run_dir, "html")
        except Exception as exc:  # a report problem must not hide the verdict
            node.user_properties.append(("chaos_report_error", str(exc)))
            return
    node.user_properties.append(("chaos_report", str(path)))


@pytest.fixture
def chaos(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosRunner]:
    yield ChaosRunner(_out_dir(request.config, tmp_path_factory), request.node)


class ChaosVerdict(Exception):
    def __init__(self, result: RunResult):
        self.result = result
        super().__init__(result.model.why)


class ChaosScenarioFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        # lazy: pytest loads this plug-in in every session; the engine only when a test runs one
        from chaos.loading import ScenarioInvalid, load_scenario

        try:
            scenario = load_scenario(self.path)
        except ScenarioInvalid as exc:  # a collection error of file:line messages, without pytest's traceback
            raise self.CollectError(str(exc) + (f"\n(note: {exc.later})" if exc.later else "")) from None
        yield ChaosScenarioItem.from_parent(self, name=scenario.name, scenario=scenario)


class ChaosScenarioItem(pytest.Item):
    def __init__(self, *, scenario: Any, **kwargs: Any):
        super().__init__(**kwargs)
        self.scenario = scenario

    result: RunResult | None = None

    def setup(self) -> None:
        """Runs the scenario: an exception here is a pytest error, which is what a test that did not happen is."""
        factory = self.config._tmp_path_factory  # type: ignore[attr-defined]
        runner = ChaosRunner(_out_dir(self.config, factory), self)
        self.result = runner.run(self.scenario)
        if self.result.errored:
            pytest.fail(_message(self.result, "error: the test did not happen"), pytrace=False)

    def runtest(self) -> None:
        assert self.result is not None  # setup ran it
        if not self.result.passed:
            raise ChaosVerdict(self.result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ChaosVerdict):
            return _message(excinfo.value.result, "fail: the job broke")
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"chaos scenario {self.name}"


def _message(r: RunResult, what: str) -> str:
    """The item's report: what kind of outcome, the verdict and why, where the run is, then the summary: rich's
    tables on a terminal, plain lines elsewhere (a CI log, JUnit, a CI summary page: box drawing reads badly
    there)."""
    on_terminal = sys.stdout.isatty() and os.environ.get("CI") != "true"
    body = r.table() if on_terminal else r.plain()
    result = r.model
    return f"{what}\nverdict {result.verdict}: {result.why}\nrun directory: {r.run_dir}\n\n{body}"


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> pytest.Collector | None:
    if file_path.name.endswith(".chaos.yaml") and parent.config.getoption("--chaos-scenarios"):
        return ChaosScenarioFile.from_parent(parent, path=file_path)
    return None
