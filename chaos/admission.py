"""One judgement of a scenario, shared by ``chaos validate`` and ``chaos run`` (dry or not), explore and compare.

``validate`` used to stop at the schema while ``run`` went on to build the plan, look for the program and check
the machine, so a file could be "ok" and then be refused (or fail inside torchrun). Here every check that needs
no cluster runs for both: the schema (with the workload's declared arguments and the blast radius of its paths),
the plan (the same ``build_plan`` the engine runs, on loopback addresses), the program the command starts, and,
unless asked not to, the machine checks (``chaos.doctor.unmet``). Every problem comes back as a
:class:`~chaos.loading.ScenarioError`: ``file:line: field: what was expected``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from chaos.doctor import advice, unmet
from chaos.loading import ScenarioError, ScenarioInvalid, locate, parse_scenario, read_scenario_text
from chaos.plan import Addressing, PlanError, build_plan
from chaos.scenario import CommandWorkload, Scenario

# Where a judged plan pretends to run: only its shape matters (no directory is created).
_PLACEHOLDER_RUN_DIR = Path("runs") / "judged-run"


def program_problem(scenario: Scenario) -> str | None:
    """Why the command workload's program (or Python script) cannot be started, or None."""
    w = scenario.workload
    if not isinstance(w, CommandWorkload):
        return None
    argv = list(w.command)
    if any("\0" in arg for arg in argv):
        return "an argument contains a NUL character, which no command line can carry"
    if Path(argv[0]).name == "env":  # `env NAME=value ... program`: judge the program it starts
        rest = argv[1:]
        while rest and "=" in rest[0] and not rest[0].startswith("-"):
            rest = rest[1:]
        if not rest or rest[0].startswith("-"):
            return None  # env's own options: nothing more to judge here (workload.env is the simpler way)
        argv = rest
    first = argv[0]
    if Path(first).name.startswith("python") and not first.endswith(".py"):
        if len(argv) < 2 or argv[1].startswith("-"):
            return None  # the interpreter itself (replaced by the node's), with options the plan judges
        program, what = argv[1], "script"
    else:
        program, what = first, "script" if first.endswith(".py") else "program"
    if what == "program" and "/" not in program:
        if shutil.which(program) is None:
            return f"program {program!r} is not on PATH; give its absolute path"
        return None
    if not os.path.isabs(program):
        return (f"{what} {program!r} is a relative path, but every node starts in its fresh run directory, where it "
                "does not exist; name it relative to the scenario file's directory (a .py script there is found), "
                f"or give the absolute path (e.g. {os.path.abspath(program)})")
    if not os.path.isfile(program):
        return f"{what} {program!r} does not exist"
    if what == "program" and not os.access(program, os.X_OK):
        return f"program {program!r} is not executable"
    return None


def judge_scenario(scenario: Scenario, file: str, text: str, machine: bool = True) -> list[ScenarioError]:
    """Every problem a valid-by-schema scenario still has on this machine, each placed at its field's line."""

    problems: list[str] = []
    try:
        build_plan(scenario, "judged-run", Path.cwd() / _PLACEHOLDER_RUN_DIR, Addressing.loopback(scenario))
    except PlanError as exc:
        problems.append(str(exc))
    if (why := program_problem(scenario)) is not None:
        problems.append(f"workload.command: {why}")
    errors = [locate(file, text, p) for p in problems]
    if machine:
        unfit = unmet(scenario)
        if unfit:
            errors.append(locate(file, text, f"cluster.runtime: {advice(unfit)}"))
    return errors


def admit(path: str | Path, runtime: str | None = None, machine: bool = True) -> Scenario:
    """The scenario at ``path`` if ``run`` would start it; else ScenarioInvalid with every problem."""
    text = read_scenario_text(path)
    scenario = parse_scenario(text, str(path), runtime=runtime)
    errors = judge_scenario(scenario, str(path), text, machine=machine)
    if errors:
        raise ScenarioInvalid(errors)
    return scenario
