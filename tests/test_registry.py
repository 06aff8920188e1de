"""The plug-in registry seen from outside: broken third-party plug-ins are named, never silently dropped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from chaos.registry import fault_plugins, rendezvous_plugins, runtime_plugins
from chaos.scenario import Scenario

BROKEN = {
    "chaos_broken_import.py": "raise ImportError('needs a library this machine lacks')\n",
    "chaos_wrong_kind.py": (
        "from typing import Literal\n"
        "from chaos.plugin import FaultKind, FaultSpec\n"
        "class Opts(FaultSpec):\n    kind: Literal['other']\n"
        "class Wrong(FaultKind):\n    kind = 'other'\n    options = Opts\n"
        "    def inject(self, ctx):\n        return 'nothing'\n"),
    "chaos_optional_example.py": (  # EXAMPLES on a field with a default would make it required behind the schema
        "from typing import ClassVar, Literal\n"
        "from chaos.plugin import FaultKind, FaultSpec\n"
        "class Opts(FaultSpec):\n    EXAMPLES: ClassVar = {'name': 'name: a'}\n    kind: Literal['optional_example']\n"
        "    name: str = 'marker'\n"),
}
ENTRY_POINTS = ("[torch_chaos.faults]\nbroken_import = chaos_broken_import:Nope\n"
                "wrong_kind = chaos_wrong_kind:Wrong\noptional_example = chaos_optional_example:Opts\n"
                "[torch_chaos.runtimes]\nbroken_runtime = chaos_broken_import:Nope\n")


def install_fake_package(root: Path) -> dict[str, str]:
    """A distribution on PYTHONPATH whose two fault plug-ins are broken in different ways."""
    for name, text in BROKEN.items():
        (root / name).write_text(text)
    info = root / "chaos_broken-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: chaos-broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}


# A test's CLI calls run one after another in one new interpreter (``chaos.cli.main``, what ``python -m chaos``
# calls), the fake distribution on its path from the start as for a user: each call's exit code, stdout and stderr
# come back apart. An interpreter per call cost ~0.7 CPU-s more each and proved nothing more (issue 30).
_CALLS = """
import contextlib, io, json, sys
from chaos.cli import main
done = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        if isinstance(code, str):  # what the interpreter would print and exit 1 with
            print(code, file=sys.stderr)
            code = 1
    done.append([code or 0, out.getvalue(), err.getvalue()])
print(json.dumps(done))
"""


def chaos(calls: list[list[str]], env: dict[str, str], cwd: Path) -> list[subprocess.CompletedProcess[str]]:
    """Each of ``calls`` (a command line without ``chaos``) as a finished process would be: returncode, stdout,
    stderr. A call that raises out of ``main`` ends the interpreter with its traceback, which fails here."""
    proc = subprocess.run([sys.executable, "-c", _CALLS, json.dumps(calls)], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [subprocess.CompletedProcess(argv, code, out, err)
            for argv, (code, out, err) in zip(calls, json.loads(proc.stdout), strict=True)]


def test_builtins_register_through_entry_points() -> None:
    assert {"crash", "kill_worker", "freeze", "corrupt_checkpoint", "delay", "loss", "bandwidth", "partition",
            "isolate", "disk_full", "io_error", "slow_io", "fsync_stall", "lost_writes"} <= set(fault_plugins())
    assert {"local", "netns", "docker"} <= set(runtime_plugins())
    assert "c10d" in rendezvous_plugins()
    schema = json.dumps(Scenario.model_json_schema())
    for name, plugin in fault_plugins().items():
        assert plugin.options.__name__ in schema, name


def test_broken_plugins_are_reported_not_dropped(tmp_path: Path) -> None:
    env = install_fake_package(tmp_path)
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\ncluster: {runtime: broken_runtime}\nworkload: {name: ddp-mlp}\nfaults:\n"
                        "  - {kind: broken_import, at_step: 3}\n")
    listed, checked = chaos([["plugins", "--json"], ["validate", "--no-machine", str(scenario)]], env, tmp_path)
    assert listed.returncode == 1, listed.stderr
    report = json.loads(listed.stdout)
    failed = "\n".join(report["failed_to_load"])
    assert "broken_import" in failed and "needs a library this machine lacks" in failed
    assert "wrong_kind" in failed and "its kind is 'other'" in failed
    assert "optional_example" in failed and "EXAMPLES names name, which is not a required field" in failed
    assert "broken_runtime" in failed
    assert "crash" in {p["name"] for p in report["plugins"]}  # the built-ins still load
    assert checked.returncode == 2
    said = checked.stderr.replace("\n", "")
    assert "s.yaml:5: faults[0].kind: the plug-in for 'broken_import' is installed but failed to load" in said, said
    assert "s.yaml:2: cluster.runtime: the plug-in for 'broken_runtime' is installed but failed to load" in said, said
    assert "Traceback" not in checked.stderr


RAISING = {
    "chaos_raising.py": (
        "from typing import Literal\n"
        "from chaos.plugin import FaultKind, FaultSpec\n"
        "class Opts(FaultSpec):\n    kind: Literal['raising']\n"
        "class Raising(FaultKind):\n    kind = 'raising'\n    options = Opts\n    summary = 'raises'\n"
        "    def inject(self, ctx):\n        return 'nothing'\n"
        "    @classmethod\n    def machine_checks(cls):\n        raise OSError('probe failed')\n"
        "    @classmethod\n    def check(cls, spec, scenario):\n        raise RuntimeError('a bug in check')\n"
        "class OptsB(FaultSpec):\n    kind: Literal['instance_check']\n"
        "class InstanceCheck(FaultKind):\n    kind = 'instance_check'\n    options = OptsB\n"
        "    def inject(self, ctx):\n        return 'nothing'\n"
        "    def check(self, spec, scenario):\n        return []\n"),
}


def test_a_plugin_hook_that_raises_is_named_not_a_traceback(tmp_path: Path) -> None:
    """A third-party hook's bug is that plug-in's failing check or problem, naming it and its module; a hook
    written as a plain method where the base has a classmethod is a load error that says so."""
    for name, text in RAISING.items():
        (tmp_path / name).write_text(text)
    info = tmp_path / "chaos_raising-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: chaos-raising\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[torch_chaos.faults]\nraising = chaos_raising:Raising\n"
                                           "instance_check = chaos_raising:InstanceCheck\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nworkload: {name: ddp-mlp}\nfaults:\n  - {kind: raising, target: 1, at_step: 3}\n")
    doctor, checked = chaos([["doctor", "--json"], ["validate", "--no-machine", str(scenario)]], env, tmp_path)
    assert "Traceback" not in doctor.stderr, doctor.stderr
    said = doctor.stdout.replace("\n", " ")
    assert "the plug-in 'raising' (chaos_raising) raised in machine_checks(): OSError: probe failed" in said, said
    assert "instance_check" in said and "check must be @classmethod, as in FaultKind" in said, said
    assert checked.returncode == 2 and "Traceback" not in checked.stderr, checked.stderr
    assert ("s.yaml:4: faults[0].kind: the plug-in 'raising' (chaos_raising) raised in check(): RuntimeError: a bug "
            "in check") in checked.stderr.replace("\n", ""), checked.stderr
