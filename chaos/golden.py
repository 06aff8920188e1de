"""Golden runs: the same workload and cluster shape without faults, cached by what affects the numbers.

A faulted run is only "correct" if it ends where a fault-free run ends. The golden run is that reference. It is
cached by content in the user's cache directory (``$TORCH_CHAOS_GOLDEN_CACHE``, else
``$XDG_CACHE_HOME/torch-chaos/golden``, else ``~/.cache/torch-chaos/golden``) under ``<key>/``, where the key hashes
the workload (code and arguments that affect the numbers), the cluster shape (world size and mode decide the
floating-point summation order) and the torch version: a suite of scenarios on the same job, across runs, pytest
sessions and output directories, pays for it once. A lock file per key makes two concurrent runs that need the
same golden run compute it once (the second waits, then reuses it).

A golden run that restarted (a worker crashed, even after the job had finished) is not a trustworthy reference:
it is run once more, and if that one restarts too its summary says ``trusted: false`` and is not cached.

The *control run* (chaos.analysis.noise says why it exists) is the golden job resumed once at a given step with
the same world size: ``kill_worker`` on node0 (elastic: its agent restarts the workers, the other agents rejoin,
the store in node0's agent survives) or a crash of the single node replaced at once by the engine (centralized:
there is no agent to restart anything), right after the step the faulted run resumed from plus one, so it
resumes from the same checkpoint. It is cached beside the golden run under ``<key>-control-<step>/`` with the same
lock discipline, and trusted only with exactly its one planned restart.

Where the golden run runs (``checks.golden``): *beside* the engine, as local processes (the reference numbers do not
depend on where nodes run: a container runs the same torch build), or on the *cluster*: the same job on the
scenario's own runtime, fault-free. The default is beside where the runtime's nodes are this machine's kind
(local, docker, netns) and on the cluster where the engine sits on a login node (Slurm: an allocation of the same
shape before the faulted run's, its run directory under the faulted run's ``--out``, which the hosts share; the
cache holds its summary, keyed apart from a local one). Either way its summary lands in the run directory's
``golden.json``, so ``matches_golden`` is computed the same way.

This module runs nothing itself: the caller passes how to run a scenario (the engine passes itself), so the
golden cache does not import the engine.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, get_args

from chaos.analysis.checkpoints import first_resume_step, golden_summary
from chaos.analysis.hangs import failed_after_last_step
from chaos.analysis.progress_lines import unmatched_progress
from chaos.events import WRITE_PROGRESS_FIRST_BYTES, EndReason, Ev, Source, TriggerEvent
from chaos.faults.base import LAYOUTS, launch_layout
from chaos.history import Event, read_history
from chaos.paths import GOLDEN_CACHE_ENV
from chaos.plan import SHIPPED_WORKLOADS
from chaos.progress_regex import compile_progress
from chaos.registry import PluginError, fault_plugins, runtime_class
from chaos.scenario import Checks, CommandWorkload, Expect, NodeRestart, Scenario, ShippedWorkload, make_fault
from chaos.storage.layer import counts_as_trigger, watches_shipped

CACHE_ENV = GOLDEN_CACHE_ENV
SUMMARY_FILE = "golden.json"
CONTROL_FILE = "control.json"
ATTEMPTS = 2  # a golden or control run that restarted unprovoked is run once more, not until it happens to be clean
# torchrun's agent logs every worker that dies (as chaos.engine.progress reads it live): in a golden run any such
# line is an unprovoked restart even when the job printed nothing afterwards; in a control run whose history has no
# agent events to time them, any but the planned SIGKILL (-9), e.g. gloo's abort at exit (-6).
_WORKER_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")

# Arguments of the shipped workload that change how and when it saves or breaks, never what a fault-free run
# computes (the planted bugs only act on resume), so they stay out of the key.
NUMERICALLY_NEUTRAL_ARGS = {"checkpoint_dir", "checkpoint_every", "keep", "bug", "pg_timeout_s", "step_time_ms"}
# Of those, the ones that only pace the job (a sleep per step): the reference runs leave them out. A scenario paced
# so that its fault lands in time (elastic-freeze: 25 ms a step) would otherwise pay its pacing twice more, in a
# golden run whose losses and final state are the same without it (and in its control run).
PACING_ARGS = {"step_time_ms"}

# Runs a scenario with its run directory under the given directory; returns that run directory (which holds
# events.jsonl and result.json once it returns).
ScenarioRunner = Callable[[Scenario, Path], Path]
# What the engine calls for a scenario's golden summary (a GoldenCache, or a stand-in in tests).
GoldenRunner = Callable[[Scenario], dict[str, Any]]
# What the engine calls for a control run's summary: the scenario and the step its clean resume starts from.
ControlRunner = Callable[[Scenario, int], dict[str, Any]]


GoldenWhere = Literal["beside", "cluster"]


def golden_where(scenario: Scenario) -> GoldenWhere | None:
    """Where the scenario's golden run runs (``checks.golden``): ``true`` is beside the engine where the runtime
    allows it and on the cluster where it does not (a login node); None when no golden run is asked for."""
    asked = scenario.checks.golden
    if asked is False:
        return None
    if asked is True:
        return "beside" if runtime_class(scenario.cluster.runtime).golden_beside_engine else "cluster"
    return asked


def on_cluster(scenario: Scenario) -> bool:
    """Whether the golden run is a run on the scenario's own (non-local) runtime, not local processes."""
    return golden_where(scenario) == "cluster" and scenario.cluster.runtime != "local"


def wants_golden(scenario: Scenario) -> bool:
    return golden_where(scenario) is not None and no_golden_why(scenario) is None


def no_golden_why(scenario: Scenario) -> str | None:
    """Why a scenario that asks for a golden run (``checks.golden``) gets none; None when it gets one."""

    w = scenario.workload
    if isinstance(w, CommandWorkload) and "loss" not in compile_progress(w.progress_regex).groupindex:
        return "the script prints no loss (progress_regex has no 'loss' group), so a golden run would have nothing " \
               "to compare"
    runtime = scenario.cluster.runtime
    if golden_where(scenario) == "beside" and not runtime_class(runtime).golden_beside_engine:
        return (f"checks.golden: beside asks for local processes beside the engine, and on runtime {runtime} that "
                "is a login node, not the nodes' kind of machine: write checks.golden: cluster (the default on "
                f"{runtime}) to run the fault-free job on the cluster itself, or use runtime local for a CPU-sized "
                "job")
    return None


def torch_version() -> str | None:
    """torch's version from its installed metadata: importing torch for a string costs ~1.5 s of CPU."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - torch is a dependency
        return None


def _installed(dist: str) -> str | None:
    """An installed distribution's version from its metadata (no import), None when it is not installed."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def golden_key(scenario: Scenario) -> str:
    w = scenario.workload
    c = scenario.cluster
    if isinstance(w, CommandWorkload):
        workload: dict[str, Any] = {"command": w.command, "progress_regex": w.progress_regex}
        if w.env:  # a variable can change what the job computes (a seed, a precision switch, a thread count)
            workload["env"] = dict(sorted(w.env.items()))
        script = next((Path(a) for a in w.command if a.endswith(".py") and Path(a).is_file()), None)
    else:
        workload = {"name": w.name, "args": {k: v for k, v in sorted(w.args.items())
                                             if k not in NUMERICALLY_NEUTRAL_ARGS}}
        script = SHIPPED_WORKLOADS[w.name]
    if script is not None:
        workload["code_sha256"] = hashlib.sha256(script.read_bytes()).hexdigest()
    material = {"workload": workload, "mode": c.mode, "world_size": c.nodes * c.procs_per_node,
                "threads": c.threads_per_proc, "torch": torch_version()}
    if on_cluster(scenario):  # the cluster's hosts and torch build, not this machine's: never a local run's key
        material["ran_on"] = c.runtime
    if c.mode == "tf-multiworker":  # TensorFlow computes that job's numbers (only there: other keys stay as they were)
        material["tensorflow"] = _installed("tensorflow")
    if watches_shipped(scenario):  # its trigger counts include the layer's events: a run cached without them lacks them
        material["storage_watch"] = True
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def golden_scenario(scenario: Scenario) -> Scenario:
    workload = scenario.workload.model_copy(deep=True)  # `update` values below are not copied by model_copy
    if isinstance(workload, ShippedWorkload):
        workload.args = {k: v for k, v in workload.args.items() if k not in PACING_ARGS}
    storage = scenario.storage.model_copy(update={"watch": watches_shipped(scenario)})
    return scenario.model_copy(deep=True, update={
        "name": f"{scenario.name}-golden", "faults": [], "expect": Expect(), "checks": Checks(golden=False),
        "workload": workload, "storage": storage,
        # Beside the engine, local processes: the reference numbers do not depend on where nodes run (a container
        # runs the same torch build), and a fault-free run needs no network of its own. On the cluster: the same
        # runtime and allocation shape (its options, spares included), the job alone.
        "cluster": scenario.cluster.model_copy(update={"node_restart": NodeRestart(policy="never"),
                                                       "runtime": scenario.cluster.runtime if on_cluster(scenario)
                                                       else "local"}),
    })


def default_cache_dir() -> Path:
    """``$TORCH_CHAOS_GOLDEN_CACHE``, else ``$XDG_CACHE_HOME/torch-chaos/golden``, else ``~/.cache/...``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "torch-chaos" / "golden"


@contextlib.contextmanager
def _locked(path: Path, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``: released when the holder's file is closed, even if it is killed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait(f"waiting for another run computing the same golden run ({path.stem})")
            fcntl.flock(f, fcntl.LOCK_EX)  # until the other process is done; then its result is reused
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def resume_kind(layout: str) -> str:
    """The fault kind whose one fault is a clean resume in ``layout`` (FaultKind.clean_resume_layouts)."""
    able = sorted(k for k, p in fault_plugins().items() if layout in p.clean_resume_layouts)
    if not able:
        raise PluginError(f"no installed fault kind makes a clean resume in {LAYOUTS.get(layout, layout)} "
                          "(FaultKind.clean_resume_layouts), which the control run needs")
    return able[0]


def control_scenario(scenario: Scenario, resume_step: int) -> Scenario:
    """The golden job with one clean resume from the checkpoint of ``resume_step``: a kill right after step
    ``resume_step + 1`` (held there by the probe, or as soon as the engine reads it from a print-only job)."""
    base = golden_scenario(scenario)
    c = base.cluster
    layout = launch_layout(c)
    kind = resume_kind(layout)
    fault = make_fault(kind=kind, target=0, at_step=resume_step + 1)
    if c.mode == "centralized":
        cluster = c.model_copy(update={"node_restart": NodeRestart(policy="on-failure", delay_s=0.5, max_restarts=1)})
    else:
        cluster = c.model_copy(update={"max_restarts": 1}) if c.max_restarts == 0 else c
    return base.model_copy(update={"name": f"{scenario.name}-control", "faults": [fault], "cluster": cluster})


def restarts_of(result: dict[str, Any]) -> int:
    """Worker restarts of a fault-free run, during training or after the job had finished."""
    return int(result.get("restarts") or 0) + int(result.get("restarts_after_completion") or 0)


def logged_worker_failures(run_dir: Path) -> list[int]:
    """Exit codes of the workers torchrun's agents reported dead in the run's node logs."""
    codes = []
    for log in sorted((run_dir / "logs").glob("*.log")):
        with contextlib.suppress(OSError):
            codes += [int(m.group(1)) for m in _WORKER_FAILED.finditer(log.read_text(errors="replace"))]
    return codes


def golden_problem(run_dir: Path, result: dict[str, Any], events: list[Event]) -> str | None:
    """Why a completed golden run is not a fault-free reference, or None."""
    restarts = restarts_of(result)
    if restarts:
        return f"restarted {restarts} time(s)"
    failed = logged_worker_failures(run_dir)
    if failed:
        return f"had {len(failed)} worker(s) die (exit codes {sorted(set(failed))}) although nothing was injected"
    return None


def control_problem(run_dir: Path, result: dict[str, Any], events: list[Event]) -> str | None:
    """Why a completed control run is not one clean resume, or None."""
    faults = result.get("faults") or [{}]
    if not faults[0].get("injected"):
        return f"its planned kill did not happen ({faults[0].get('why_not_injected', 'no fault recorded')})"
    restarts, after = int(result.get("restarts") or 0), int(result.get("restarts_after_completion") or 0)
    if restarts != 1 or after:
        return f"restarted {restarts} time(s) during training and {after} after it (1 planned)"
    early = _failed_before_kill(run_dir, events)
    if early is not None:
        return early
    if first_resume_step(events) is None:
        return "shows no resumed worker in its history"
    return None


def _died_after_training(end_reason: str | None, events: list[Event]) -> str | None:
    """Why a fault-free run that did not complete is run once more: its workers died after its last step (an
    exit-time crash of the job, which torchrun's agent turned into a hang), a transient failure a second run
    tells from a job that never completes; any other failure is reported as it is."""

    if end_reason != EndReason.HUNG:  # a job that failed or crash-looped does so again: reported as it is
        return None
    late = failed_after_last_step(events)
    return f"ended {end_reason}: {late}" if late else None


def _failed_before_kill(run_dir: Path, events: list[Event]) -> str | None:
    """A worker group that failed before the planned kill: the only unprovoked death a control run can show
    without a second restart. After the kill, the other nodes' workers die of their own accord too (gloo's
    "Connection closed by peer" exits 1) whenever they notice the lost peer before their agent restarts them: that
    is the kill's doing, and which of the two comes first is a race the machine's load decides."""
    if not any(e.get("source") == Source.AGENT for e in events):  # no agent events (no torchrun agent, or an
        # older history): the node logs' failure lines, untimed; any but the planned SIGKILL is unprovoked
        unplanned = [c for c in logged_worker_failures(run_dir) if c != -9]
        return f"had worker(s) die unprovoked (exit codes {sorted(set(unplanned))})" if unplanned else None
    kills = [e for e in events if e.get("event") == Ev.FAULT_INJECTED]
    if not kills:
        return None  # the planned kill did not happen: said above
    t_kill = float(kills[0]["t"])
    early = [e for e in events if e.get("event") == Ev.AGENT_WORKERS_FAILED and float(e["t"]) < t_kill]
    if early:
        first = early[0]
        return (f"had a worker group fail unprovoked before the planned kill ({first.get('node', 'a node')}, "
                f"{t_kill - float(first['t']):.1f} s before it)")
    return None


# trigger_counts' count of the saves the storage layer saw (not an event name)
LAYER_SAVES = "storage_layer_saves"


class TriggerCannotFire(Exception):
    """A fault's ``on:`` trigger that the fault-free run shows cannot fire for this job (a write-progress event
    past a size no save of it reaches): said before the faulted run, which would end with the fault not injected."""


def trigger_counts(events: list[Event], scenario: Scenario | None = None) -> dict[str, int]:
    """How often the fault-free run emitted each event a fault may be triggered on (counted as the engine counts
    them for ``scenario``'s job, :func:`chaos.storage.layer.counts_as_trigger`; without it, every job source)."""
    names = set(get_args(TriggerEvent))
    counts: dict[str, int] = {}
    for e in events:
        name = e.get("event")
        if name in names and e.get("source") != Source.ENGINE and (scenario is None or counts_as_trigger(scenario, e)):
            counts[str(name)] = counts.get(str(name), 0) + 1
    # the saves the storage layer itself saw: checkpoint_write_progress comes only from it (or a probe that says it)
    counts[LAYER_SAVES] = sum(1 for e in events if e.get("event") == Ev.CHECKPOINT_SAVE_FINISHED
                              and e.get("source") == Source.STORAGE)
    return counts


def trigger_problems(scenario: Scenario, summary: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Each ``on:`` trigger against what the fault-free run emitted: (problems: triggers that cannot fire for this
    job, warnings: occurrences beyond the fault-free run's count, which only the faults' own re-saves could reach).
    Nothing for a summary without counts (a golden run cached before they were kept)."""
    counts = summary.get("trigger_counts")
    if not isinstance(counts, dict):
        return [], []
    problems, warnings = [], []
    saves = counts.get(Ev.CHECKPOINT_SAVE_FINISHED, 0) or counts.get(Ev.CHECKPOINT_SAVE_STARTED, 0)
    for i, fault in enumerate(scenario.faults):
        on = fault.on
        if on is None:
            continue
        seen = counts.get(on.event, 0)
        where = f"faults[{i}].on"
        if on.event == Ev.CHECKPOINT_WRITE_PROGRESS and seen == 0 and saves and counts.get(LAYER_SAVES) == 0:
            problems.append(f"{where}: checkpoint_write_progress never happens for this job: its fault-free run "
                            f"made {saves} save(s) and the storage layer saw none of them (the job reported them "
                            "itself, and the layer, which emits this event, did not watch its fault-free run: "
                            "storage.layer is off, or the run was cached before such a trigger mounted it); "
                            "trigger on checkpoint_save_started")
        elif on.event == Ev.CHECKPOINT_WRITE_PROGRESS and seen == 0 and saves:
            problems.append(f"{where}: checkpoint_write_progress never happens for this job: its fault-free run "
                            f"made {saves} save(s), none of which wrote {WRITE_PROGRESS_FIRST_BYTES >> 20} MiB "
                            "(the event fires when a save's bytes pass it); trigger on checkpoint_save_started")
        elif on.event in (Ev.CHECKPOINT_SAVE_STARTED, Ev.CHECKPOINT_SAVE_FINISHED) and on.occurrence > seen:
            warnings.append(f"{where}: the fault-free run emitted {on.event} {seen} time(s); #{on.occurrence} "
                            "happens only if the faults before it make the job save again")
    return problems, warnings


def golden_missed_progress(scenario: Scenario, summary: dict[str, Any]) -> str | None:
    """Why a print-only job's golden run recorded no step: its ``progress_regex`` matched none of the lines the
    job printed (the pattern and a line it should match, ``unmatched_progress``). None for a run that recorded
    steps, a job followed through the probe, or a golden run whose directory is gone."""
    workload = scenario.workload
    run_dir = Path(str(summary.get("run_dir") or ""))
    if not isinstance(workload, CommandWorkload) or summary.get("steps") or not (run_dir / "events.jsonl").is_file():
        return None
    return unmatched_progress(run_dir, workload.progress_regex, read_history(run_dir / "events.jsonl"))


class GoldenCache:
    """The golden summary of a scenario's workload, from the cache or from a new golden run (then cached)."""

    def __init__(self, run_scenario: ScenarioRunner, directory: Path | None = None,
                 on_wait: Callable[[str], None] | None = None, cluster_out: Path | None = None):
        self.run_scenario = run_scenario
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.on_wait = on_wait  # told when another process holds the key's lock (the wait can be a minute)
        # Where a golden or control run on the cluster puts its run directory: the faulted run's --out, which the
        # cluster's hosts share (the cache directory is the engine host's own, which a compute host cannot write).
        self.cluster_out = cluster_out

    def __call__(self, scenario: Scenario) -> dict[str, Any]:
        def compute(home: Path) -> dict[str, Any]:
            summary = self._compute(golden_scenario(scenario), self._home(scenario, home), "fault-free",
                                    golden_problem)
            missed = golden_missed_progress(scenario, summary)
            if missed is not None:  # not a reference (and not cached): the pattern is fixed before the next run
                summary.update(trusted=False, untrusted_why=f"the fault-free run recorded no step: {missed}")
            return summary

        return self._cached(golden_key(scenario), SUMMARY_FILE, compute)

    def control(self, scenario: Scenario, resume_step: int) -> dict[str, Any]:
        """The control run's summary for a clean resume from ``resume_step`` (cached like the golden run)."""
        def compute(home: Path) -> dict[str, Any]:
            summary = self._compute(control_scenario(scenario, resume_step), self._home(scenario, home), "control",
                                    control_problem)
            summary["resume_step"] = resume_step
            return summary

        return self._cached(f"{golden_key(scenario)}-control-{resume_step}", CONTROL_FILE, compute)

    def _home(self, scenario: Scenario, home: Path) -> Path:
        """Where the reference run's run directory goes: the cache entry, or for a run on the cluster the faulted
        run's --out (the hosts write it)."""
        return self.cluster_out if on_cluster(scenario) and self.cluster_out is not None else home

    def _cached(self, key: str, filename: str, compute: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
        home = self.directory / key
        summary_path = home / filename
        with _locked(self.directory / f"{key}.lock", self.on_wait):
            if summary_path.exists():
                summary = json.loads(summary_path.read_text())
                summary["cached"] = True
                return summary
            home.mkdir(parents=True, exist_ok=True)
            summary = compute(home)
            summary["key"] = key
            if summary["completed"] and summary["trusted"]:  # a failed or untrusted run is not cached
                tmp = home / f".{filename}.tmp"
                tmp.write_text(json.dumps(summary))
                os.replace(tmp, summary_path)
            return summary

    def _compute(self, scenario: Scenario, home: Path, what: str,
                 problem_of: Callable[[Path, dict[str, Any], list[Event]], str | None]) -> dict[str, Any]:
        tried: list[str] = []
        for _ in range(ATTEMPTS):
            run_dir = self.run_scenario(scenario, home)
            events = read_history(run_dir / "events.jsonl")
            summary = golden_summary(events)
            summary.update(run_dir=str(run_dir), cached=False, trusted=True,
                           trigger_counts=trigger_counts(events, scenario),
                           resumed_from=first_resume_step(events),
                           where="beside" if scenario.cluster.runtime == "local" else "cluster",
                           runtime=scenario.cluster.runtime)
            result_path = run_dir / "result.json"
            result = json.loads(result_path.read_text()) if result_path.exists() else {}
            # named by matches_golden when it did not complete (result.json's, else the history's own)
            summary["end_reason"] = result.get("end_reason") or next(
                (e.get("reason") for e in events if e.get("event") == Ev.RUN_ENDED), None)
            problem = problem_of(run_dir, result, events) if summary["completed"] else \
                _died_after_training(summary["end_reason"], events)
            if problem is None:
                if tried:
                    summary["retried_after"] = tried
                break  # a failed run is reported as such; running it again would not make it a reference
            tried.append(f"{run_dir.name} {problem}")
            summary.update(trusted=False, untrusted_why=f"the {what} run {problem} ({len(tried)} attempt(s): "
                                                        f"{'; '.join(tried)})")
        return summary
