"""The report renderer (chaos.reports.renderer): a process that imports matplotlib while the job runs, draws
report.html from the run directory at the end, and leaves nothing behind; when it cannot, the engine draws it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from chaos.reports import write_report
from chaos.reports.renderer import Renderer, RenderFailed, autogroup_nice
from tests.conftest import RECORDED_REPORTS_GROUP
from tests.data.recorded import expand

pytestmark = pytest.mark.xdist_group(RECORDED_REPORTS_GROUP)
REPO = Path(__file__).resolve().parents[1]


def test_it_draws_a_run_directory_s_report_and_ends_with_its_input(tmp_path: Path) -> None:
    run_dir = expand("quickstart", tmp_path)
    renderer = Renderer()
    renderer.start()
    pid = renderer._proc.pid  # type: ignore[union-attr]
    try:
        deadline = time.monotonic() + 10  # it lowers its own priority first thing
        while psutil.Process(pid).nice() != 19 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert psutil.Process(pid).nice() == 19  # it imports in the job's idle moments
        assert autogroup_nice(pid) in (19, None)  # and so does its session, where the kernel has autogroups
        assert os.getsid(pid) != os.getsid(0)
        renderer.ask(run_dir)
        path = renderer.answer(timeout_s=60)
    finally:
        renderer.close()
    assert path == run_dir / "report.html"
    deadline = time.monotonic() + 5  # close() does not wait for its exit: a thread reaps it
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the renderer did not end at the end of its input"
        time.sleep(0.01)
    html = path.read_text()
    assert "<figure id=timeline>" in html and "<svg" in html


def test_a_report_it_cannot_draw_is_an_error_the_engine_hears(tmp_path: Path) -> None:
    renderer = Renderer()
    renderer.start()
    try:
        renderer.ask(tmp_path / "no-such-run")
        with pytest.raises(RenderFailed, match=r"no-such-run|events\.jsonl|No such file"):
            renderer.answer(timeout_s=60)
    finally:
        renderer.close()


def test_it_dies_with_the_engine(tmp_path: Path) -> None:
    """An engine killed (SIGKILL, an OOM kill) closes nothing: the renderer goes with it all the same."""
    engine = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(REPO)!r})
        from chaos.reports.renderer import Renderer
        r = Renderer()
        r.start()
        print(r._proc.pid, flush=True)
        os._exit(0)  # no close(), no end of input read yet: the renderer is still importing
        """)], capture_output=True, text=True, check=True, timeout=60)
    pid = int(engine.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    else:
        psutil.Process(pid).kill()
        pytest.fail("the renderer outlived the engine that started it")


def test_it_is_started_only_where_it_saves_an_import(monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib  # noqa: F401 (this process has it, as the pytest plug-in's and compare's have)

    assert not Renderer.saves_time()  # drawing here costs no import
    monkeypatch.delitem(sys.modules, "matplotlib")
    assert Renderer.saves_time()
    monkeypatch.setenv("TORCH_CHAOS_REPORT_RENDERER", "off")
    assert not Renderer.saves_time()


def test_an_answer_that_is_not_its_protocol_is_a_failure_the_engine_hears(tmp_path: Path) -> None:
    """Whatever goes wrong in the renderer reaches the engine as RenderFailed (it then draws the report itself),
    never as an exception of its own that would end the run after result.json."""
    renderer = Renderer()
    renderer._proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline(); print('hello')"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    try:
        renderer.ask(tmp_path)
        with pytest.raises(RenderFailed, match="something else than a JSON line"):
            renderer.answer(timeout_s=30)
    finally:
        renderer.close()


def _without_ids(html: str) -> str:
    """matplotlib names clip paths, hatches and markers by random ids: a drawing's own, not its content."""
    return re.sub(r"\b(image|[a-z])[0-9a-f]{10}\b", "ID", html)


def test_the_history_it_read_while_the_job_ran_makes_the_report_a_whole_read_makes(tmp_path: Path) -> None:
    run_dir = expand("quickstart", tmp_path / "recorded")
    whole = _without_ids(write_report(run_dir, "html", out=tmp_path / "whole.html").read_text())
    events = (run_dir / "events.jsonl").read_bytes()
    cut = len(events) // 2 + 7  # mid-line: the engine may be writing one
    (run_dir / "events.jsonl").write_bytes(events[:cut])
    renderer = Renderer()
    renderer.start()
    try:
        renderer.watch(run_dir)
        time.sleep(1.5)  # it reads the first half (each READ_EVERY_S while no request comes)
        with (run_dir / "events.jsonl").open("ab") as f:
            f.write(events[cut:])
        renderer.ask(run_dir)
        path = renderer.answer(timeout_s=60)
    finally:
        renderer.close()
    assert _without_ids(path.read_text()) == whole
