"""Scenario files: every mistake reported with file, line, field path and what was expected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.cli import main
from chaos.loading import ScenarioInvalid, load_scenario, parse_scenario, shipped_scenarios_dir
from chaos.plan import PlanError, build_plan, elastic_settings

GOOD = """\
name: ok
cluster: {nodes: 3, min_nodes: 2}
workload: {name: ddp-mlp, args: {steps: 100}}
faults:
  - {kind: crash, target: 1, at_step: 10}
"""


def errors_of(text: str) -> list[str]:
    with pytest.raises(ScenarioInvalid) as exc:
        parse_scenario(text, "s.yaml")
    return [str(e) for e in exc.value.errors]


def test_good_scenario_parses_with_defaults() -> None:
    s = parse_scenario(GOOD)
    assert s.cluster.runtime == "local" and s.cluster.mode == "elastic"
    assert s.faults[0].at_step == 10
    assert s.limits.stall_timeout_s > 0


def test_unknown_field_reports_file_line_and_path() -> None:
    errs = errors_of(GOOD.replace("min_nodes: 2", "min_nodez: 2"))
    assert errs == ["s.yaml:2: cluster.min_nodez: unknown field: did you mean 'min_nodes'? (`chaos schema` lists every "
                    "field)"]


def test_every_error_is_reported_at_once() -> None:
    text = """\
name: two
cluster:
  mode: elastik
workload:
  name: ddp-mlp
faults:
  - kind: crash
    target: 1
    at: 5x
"""
    errs = errors_of(text)
    # the modes listed are the registered launchers' (plug-ins add theirs: ray, tf-multiworker)
    assert any(e.startswith("s.yaml:3: cluster.mode: expected 'elastic', 'centralized'")
               and e.endswith("got 'elastik' (did you mean 'elastic'?)") for e in errs), errs
    assert any(e.startswith("s.yaml:9: faults[0].at: expected a duration") for e in errs)
    assert len(errs) == 2


@pytest.mark.parametrize(("fault", "message"), [
    ("{kind: crash, target: 1}", "give exactly one trigger"),
    ("{kind: crash, target: 1, at: 1s, at_step: 3}", "give exactly one trigger"),
    ("{kind: freeze, target: 1, at_step: 3}", "freeze needs a duration"),
    # a wrong value is said beside the kind-level problem, not in the next round
    ("{kind: freeze, target: 1, at_step: x, lenght: 3}",
     "freeze needs a duration, e.g. duration: 5s; freeze has no field 'lenght'; at_step: Input should be a valid "
     "integer"),
    ("{kind: memory_pressure, target: 1, at_step: 3, duration: 5s, limit: 2XB}", "needs size, e.g. size: 512MB; "
     "limit: expected a size"),
    ("{kind: crash, target: 1, at_step: 3, duration: 2s}", "crash takes no duration"),
    ("{kind: crash, at_step: 3}", "crash needs a target"),
    ("{kind: corrupt_checkpoint, target: 1, at_step: 3}", "takes no target"),
    ("{kind: crash, target: event_node, at_step: 3}", "needs an 'on' trigger"),
    ("{kind: explode, target: 1, at_step: 3}", "kind: expected one of 'abort', 'bandwidth', 'corrupt_checkpoint'"),
    ("{target: 1, at_step: 3}", "got none"),
    ("{kind: crash, target: 1, on: {event: nope}}", "expected 'checkpoint_save_started'"),
    # a worker the node does not have is said at validation, not found at run time (procs_per_node defaults to 1)
    ("{kind: segfault, target: 1, at_step: 3, local_rank: 3}", "local_rank: 3 does not exist"),
    ("{kind: abort, target: 1, at_step: 3, local_rank: 1}", "local_rank: 1 does not exist"),
    ("{kind: oom_kill, target: 1, at_step: 3, local_rank: 2}", "local_rank: 2 does not exist"),
    ("{kind: hang, target: 1, at_step: 3, local_rank: 5}", "local_rank: 5 does not exist"),
    # another kind's field is refused at its default value too (only a run directory's stored copy may carry it)
    ("{kind: crash, target: 1, at_step: 3, one_way: false}", "one_way applies to kind: partition only"),
    # one message naming what a target may be, not one per union member with pydantic's internal names
    ("{kind: crash, target: -1, at_step: 3}", "target: expected a node index (0, 1, ...), rendezvous_host"),
    ("{kind: bandwidth, target: 1, at_step: 3, rate: 0mbit, duration: 5s}", "expected a rate above zero"),
    ("{kind: delay, target: 1, at_step: 3, delay: 1e308ms, duration: 5s}", "delay: at most"),
])
def test_fault_errors(fault: str, message: str) -> None:
    text = f"name: f\nworkload: {{name: ddp-mlp}}\nfaults:\n  - {fault}\n"
    errs = errors_of(text)
    assert any(message in e for e in errs), errs
    assert all(e.startswith("s.yaml:4: faults[0]") for e in errs), errs


def test_target_outside_cluster() -> None:
    errs = errors_of(GOOD.replace("target: 1", "target: 5"))
    assert any("node 5 does not exist" in e for e in errs)


def test_yaml_on_key_is_not_a_boolean() -> None:
    s = parse_scenario("name: e\nworkload: {name: ddp-mlp}\nfaults:\n"
                       "  - {kind: crash, target: event_node, on: {event: checkpoint_save_started}}\n")
    assert s.faults[0].on is not None and s.faults[0].on.occurrence == 1


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    errs = errors_of("name: [unclosed\n")
    assert errs[0].startswith("s.yaml:") and "not valid YAML" in errs[0]
    with pytest.raises(ScenarioInvalid) as exc:
        load_scenario(tmp_path / "nope.yaml")
    assert "cannot read file" in str(exc.value)


def test_command_workload_needs_step_group() -> None:
    errs = errors_of("name: c\nworkload:\n  command: [python, t.py]\n  progress_regex: 'epoch (\\d+)'\n")
    assert any("named group 'step'" in e for e in errs)


def test_elastic_command_workload_must_be_python(tmp_path: Path) -> None:
    s = parse_scenario("name: c\nworkload:\n  command: [./train.sh]\n  progress_regex: 'step (?P<step>\\d+)'\n")
    with pytest.raises(PlanError):
        build_plan(s, "r", tmp_path)


def test_presets_and_overrides() -> None:
    s = parse_scenario(GOOD)
    assert elastic_settings(s)["process_group_timeout_s"] == 10
    d = parse_scenario(GOOD + "\n").model_copy(deep=True)
    d.cluster.preset = "torchrun-defaults"
    d.cluster.max_restarts = 100
    settings = elastic_settings(d)
    assert settings["last_call_timeout_s"] == 30 and settings["max_restarts"] == 100


def test_tuned_rendezvous_timeouts_grow_with_the_node_count_and_overrides_still_win() -> None:
    def settings(nodes: int, extra: str = "") -> dict:
        return elastic_settings(parse_scenario(f"name: n\ncluster: {{nodes: {nodes}{extra}}}\n"
                                               "workload: {name: ddp-mlp}\n"))

    small, eight, big = settings(3), settings(8), settings(32)
    assert small == eight and small["join_timeout_s"] == 60 and small["last_call_timeout_s"] == 2
    assert (big["join_timeout_s"], big["last_call_timeout_s"], big["read_timeout_s"],
            big["keep_alive_interval_s"]) == (240, 8, 40, 4)
    assert big["process_group_timeout_s"] == 4 * small["process_group_timeout_s"]
    assert big["max_restarts"] == small["max_restarts"] and big["close_timeout_s"] == small["close_timeout_s"]
    assert settings(32, ", rendezvous: {join_timeout_s: 90}")["join_timeout_s"] == 90
    assert settings(32, ", preset: torchrun-defaults")["join_timeout_s"] == 600


def test_plan_layouts(tmp_path: Path) -> None:
    s = parse_scenario(GOOD)
    plan = build_plan(s, "r1", tmp_path)
    assert [n.name for n in plan.nodes] == ["node0", "node1", "node2"]
    assert "is_host=true" in " ".join(plan.nodes[0].argv) and "is_host=false" in " ".join(plan.nodes[1].argv)
    assert plan.nodes[0].env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    dedicated = parse_scenario(GOOD.replace("min_nodes: 2", "min_nodes: 2, rendezvous: {store: dedicated}"))
    plan = build_plan(dedicated, "r2", tmp_path)
    assert plan.store is not None
    assert all("is_host=false" in " ".join(n.argv) for n in plan.nodes)


def test_every_shipped_scenario_is_valid() -> None:
    files = sorted(shipped_scenarios_dir().rglob("*.yaml"))
    assert len(files) >= 10
    for f in files:
        load_scenario(f)


def test_cli_validate_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("at_step: 10", "at_step: -1"))
    assert main(["validate", str(bad)]) == 2
    assert f"{bad}:5: faults[0].at_step" in capsys.readouterr().err.replace("\n", "")
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    assert main(["validate", str(good)]) == 0


def test_validate_says_what_it_checks_once_the_field_errors_are_fixed(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A field error hides the checks across sections (pydantic runs them only on valid fields): the first round
    says so, so the second round's errors do not look like ones validate missed."""
    text = ("name: s\ncluster: {nodes: 2}\nworkload: {name: ddp-mlp}\n"
            "faults:\n  - {kind: crash, target: 5, at_step: 10}\n  - {kind: crash, target: 0, at_step: BAD}\n")
    path = tmp_path / "s.yaml"
    path.write_text(text.replace("BAD", "-1"))
    assert main(["validate", str(path)]) == 2
    first = " ".join(capsys.readouterr().err.split())
    assert "faults[1].at_step" in first and "node 5 does not exist" not in first
    assert "is checked once these are fixed" in first
    path.write_text(text.replace("BAD", "1"))
    assert main(["validate", str(path)]) == 2
    second = " ".join(capsys.readouterr().err.split())
    assert f"{path}:5: faults[0].target: node 5 does not exist" in second and "note:" not in second


def test_cli_schema_and_dry_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert "cluster" in schema["properties"]
    assert main(["run", "quickstart", "--dry-run", "--json", "--out", str(tmp_path)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert len(plan["nodes"]) == 3 and plan["faults"][0]["trigger"] == "when step 330 completes"
    assert not any(tmp_path.iterdir()), "a dry run must not create anything"


def test_the_published_schema_admits_every_shipped_scenario_and_the_loader_agrees() -> None:
    """`chaos schema` is what an editor checks a scenario file against: it must accept what the loader accepts
    (durations such as "5s", sizes such as "10MB", numbers in a command) and speak JSON Schema (pydantic copies a
    bound it cannot express, `ge`, verbatim, which no editor reads)."""
    import jsonschema
    import yaml

    from chaos.loading import _Loader  # the loader's YAML 1.2 booleans: `on:` is a key, not True
    from chaos.scenario import Scenario

    schema = Scenario.model_json_schema()
    text = json.dumps(schema)
    assert not any(f'"{k}":' in text for k in ("ge", "gt", "le", "lt")), "a bound pydantic could not translate"
    validator = jsonschema.Draft202012Validator(schema)
    root = Path(__file__).resolve().parent.parent
    files = sorted([*(root / "scenarios").rglob("*.yaml"), *(root / "examples" / "byo").glob("*.yaml")])
    assert len(files) > 50
    for path in files:
        data = yaml.load(path.read_text(), Loader=_Loader)  # a SafeLoader subclass
        load_scenario(path)
        assert not list(validator.iter_errors(data)), (path, [e.message for e in validator.iter_errors(data)][:3])
    refused = yaml.load(GOOD.replace("at_step: 10", "at: 5 parsecs"), Loader=_Loader)
    assert list(validator.iter_errors(refused)) and errors_of(GOOD.replace("at_step: 10", "at: 5 parsecs"))


def test_a_fault_with_several_mistakes_gets_them_all_and_a_misspelt_field_is_not_hidden() -> None:
    text = GOOD.replace("{kind: crash, target: 1, at_step: 10}",
                        "{kind: delay, target: 1, at_step: 10, dleay: 100ms, duration: 5s, rate: 1mbit}")
    assert errors_of(text.replace("nodes: 3", "nodes: 3, runtime: netns")) == [
        "s.yaml:5: faults[0]: rate applies to kind: bandwidth only; delay needs delay, e.g. delay: 100ms; delay has "
        "no field 'dleay'"]


def test_examples_may_only_name_required_fields() -> None:
    """A plug-in's EXAMPLES on a field with a default made it required behind the schema's back."""
    from typing import ClassVar, Literal

    from chaos.spec import FaultSpec

    with pytest.raises(TypeError, match="EXAMPLES names name, which is not a required field"):
        class MarkerOptions(FaultSpec):
            EXAMPLES: ClassVar = {"name": "name: before-crash"}
            kind: Literal["marker"]
            name: str = "marker"


def test_shipped_names_resolve_exactly_and_a_directory_does_not_hide_them(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`chaos run '*'` ran whichever shipped scenario a glob found first; a directory named like a shipped scenario
    in the working directory (a run directory, say) made `chaos explore quickstart` fail with "Is a directory"."""
    from chaos.loading import resolve_scenario_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart").mkdir()
    root = shipped_scenarios_dir()
    assert resolve_scenario_path("quickstart") == root / "quickstart.yaml"
    assert resolve_scenario_path("network/delay") == root / "network" / "delay.yaml"
    assert resolve_scenario_path("delay") == root / "network" / "delay.yaml"  # a unique stem
    for name in ("*", "net*/delay", "../scenarios/quickstart"):
        assert resolve_scenario_path(name) == Path(name)
    with pytest.raises(ScenarioInvalid, match="network/partial-partition, slurm/partial-partition; give one"):
        resolve_scenario_path("partial-partition")  # two shipped files of this name: not "no such file"


def test_a_run_directory_written_before_kind_models_still_loads() -> None:
    """Older engines wrote every kind's fields on every fault (``one_way: false`` on a crash) into the run
    directory's scenario.yaml: its analysis reads them back (``stored``), a scenario a user writes may not."""
    text = GOOD.replace("at_step: 10}", "at_step: 10, one_way: false}")
    assert parse_scenario(text, "scenario.yaml", stored=True).faults[0].kind == "crash"
    assert any("one_way applies to kind: partition only" in e for e in errors_of(text))


def test_a_key_given_twice_and_unusable_workload_numbers_are_refused() -> None:
    """YAML keeps the last of two equal keys silently; an infinite lr or step_time_ms, or a seed beyond 64 bits,
    would crash the workload after the run started."""
    assert errors_of(GOOD + "name: other\n") == [
        "s.yaml:6: name: given twice (first on line 1); YAML would keep only the last"]
    for arg, says in (("lr: .inf", "finite number"), ("step_time_ms: .nan", "finite number"),
                      ("seed: 99999999999999999999999999", "within 64 bits")):
        errs = errors_of(GOOD.replace("steps: 100", f"steps: 100, {arg}"))
        assert any(says in e for e in errs), errs


def test_rules_added_later_do_not_make_an_old_run_unreadable() -> None:
    """A run directory's scenario.yaml is read for its analysis, not judged again: a delay over 60s, a zero rate,
    min above max, a local_rank the node lacks or an infinite lr (all refused today) still load from it."""
    text = """name: old
cluster: {runtime: netns, nodes: 2}
workload: {name: ddp-mlp, args: {steps: 100, lr: .inf}}
faults:
  - {kind: delay, target: 1, at_step: 3, delay: 120s, duration: 5s}
  - {kind: bandwidth, target: 1, at_step: 4, rate: 0mbit, duration: 5s}
  - {kind: segfault, target: 1, at_step: 5, local_rank: 3}
expect: {recovery_s: {min: 10, max: 5}}
"""
    assert [f.kind for f in parse_scenario(text, "scenario.yaml", stored=True).faults] == [
        "delay", "bandwidth", "segfault"]
    assert errors_of(text)  # a scenario a user writes: refused
