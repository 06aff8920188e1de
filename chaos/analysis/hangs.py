"""Did the job notice a hung rank? Per hang (a ``hang_started`` event, or a fault whose injection recorded a
``hang_mode``), from the history alone:

- ``noticed``: something reacted while the rank was stuck: the first of torchrun's agent finding its workers failed
  (a process-group timeout raised in the other ranks) or seeing a node waiting to rejoin, a node exiting, or a new
  worker process starting. ``detection_s`` = that mark's ``t`` − the hang's start (the probe's ``hang_started``:
  the moment the main thread blocked; for a stopped process, the engine's, just after the SIGSTOP);
- ``hung``: the run ended ``hung`` (no step for ``limits.stall_timeout_s``) with the rank still stuck and nothing
  having reacted: the stuck rank is named, and the run's ``why`` says so;
- ``released``: nothing reacted before the hang was released (its ``duration`` ended): the job only stalled;
- ``unnoticed``: the run ended otherwise (deadline, interrupted) with the rank stuck and nothing having reacted;
- ``not_checked``: the hang never took hold (no ``hang_started``: a ``main_thread`` hang needs the script to call
  ``chaos.probe.step_completed``), with the reason.

Names events, never a fault kind (docs/design.md, "Boundaries"). See docs/design.md, "Hangs".
"""

from __future__ import annotations

import math
from typing import Any

from chaos.analysis.checkpoints import last_new_step
from chaos.analysis.ckpt_source import run_environment
from chaos.analysis.load import of_kind
from chaos.events import EndReason, Ev, Source
from chaos.history import Event

_WORKER_SOURCES = (Source.WORKLOAD, Source.PROGRESS)


def _who(e: Event) -> dict[str, Any]:
    return {k: e.get(k) for k in ("node", "rank", "local_rank", "pid") if e.get(k) is not None}


def stuck_text(stuck: dict[str, Any]) -> str:
    """``node1 rank 1 (local_rank 0, pid 4242)``."""
    text = str(stuck.get("node", "?"))
    if stuck.get("rank") is not None:
        text += f" rank {stuck['rank']}"
    extra = [f"{k} {stuck[k]}" for k in ("local_rank", "pid") if stuck.get(k) is not None]
    return text + (f" ({', '.join(extra)})" if extra else "")


def _marks(events: list[Event], stuck_pids: set[Any]) -> list[tuple[float, str]]:
    """Everything that shows the job reacting, as (t, what), in time order."""
    marks: list[tuple[float, str]] = []
    for e in of_kind(events, Ev.AGENT_WORKERS_FAILED):
        marks.append((e["t"], f"torchrun's agent on {e.get('node')} found its workers failed"))
    for e in of_kind(events, Ev.AGENT_MEMBERSHIP_CHANGED):
        marks.append((e["t"], f"torchrun's agent on {e.get('node')} saw a node waiting to join and restarted "
                              "its workers"))
    for e in of_kind(events, Ev.NODE_EXITED):
        marks.append((e["t"], f"{e.get('node')} exited (code {e.get('code')})"))
    for e in of_kind(events, Ev.PROCESS_STARTED):
        if e.get("source") in _WORKER_SOURCES and e.get("pid") not in stuck_pids:
            marks.append((e["t"], f"a new worker started on {e.get('node')} (pid {e.get('pid')})"))
    return sorted(marks, key=lambda m: m[0])


def hang_outcomes(events: list[Event]) -> dict[int, dict[str, Any]]:
    """Per fault id with a hang: its outcome (module docstring) and figures."""
    injected = {e.get("fault_id"): e for e in of_kind(events, Ev.FAULT_INJECTED)}
    starts: dict[Any, list[Event]] = {}
    for e in of_kind(events, Ev.HANG_STARTED):
        starts.setdefault(e.get("fault_id"), []).append(e)
    ids = {i for i, e in injected.items() if isinstance(e.get("details"), dict) and e["details"].get("hang_mode")}
    ids |= {i for i in starts if i in injected}
    ends = of_kind(events, Ev.RUN_ENDED)
    end = ends[-1] if ends else None
    t_end = end["t"] if end is not None else math.inf
    let_go: dict[Any, Event] = {}  # the probe's hang_released (main_thread)
    healed: dict[Any, Event] = {}  # the engine's fault_healed (the order removed, or SIGCONT)
    for into, kind in ((let_go, Ev.HANG_RELEASED), (healed, Ev.FAULT_HEALED)):
        for e in of_kind(events, kind):
            into.setdefault(e.get("fault_id"), e)
    out: dict[int, dict[str, Any]] = {}
    for fid in sorted(i for i in ids if isinstance(i, int)):
        inj = injected[fid]
        details = inj.get("details") if isinstance(inj.get("details"), dict) else {}
        mode = details.get("hang_mode") or (starts[fid][0].get("mode") if fid in starts else None)
        entry: dict[str, Any] = {"mode": mode, "outcome": "not_checked", "stuck": None, "t_hang_started": None,
                                 "since_step": None, "detection_s": None, "noticed_by": None, "held_s": None}
        out[fid] = entry
        if fid not in starts:
            entry["why"] = (
                f"not checked: the hang never took hold (no hang_started for fault #{fid}): a main_thread hang "
                f"blocks at the rank's next step through chaos.probe.step_completed, so the script does not call "
                f"it, {inj.get('target')} has no worker with local_rank {details.get('local_rank', 0)}, or the "
                "run ended first; mode: process works for any script") if mode == "main_thread" else (
                f"not checked: no hang_started for fault #{fid} (no stopped worker was found)")
            continue
        start = starts[fid][0]
        t0 = start["t"]
        stuck = _who(start)
        if stuck.get("rank") is None and stuck.get("local_rank") is None:
            stuck["local_rank"] = details.get("local_rank")
        entry.update(stuck=stuck, t_hang_started=t0, since_step=start.get("step", inj.get("max_step")))
        probe, heal = let_go.get(fid), healed.get(fid)
        t_rel = min((e["t"] for e in (probe, heal) if e is not None), default=math.inf)
        pids = stuck.get("pid")
        stuck_pids = set(pids) if isinstance(pids, list) else {pids}
        if probe is not None and isinstance(probe.get("held_s"), (int, float)):
            entry["held_s"] = probe["held_s"]
        elif heal is not None and stuck_pids & set(heal.get("continued") or ()):  # SIGCONT found it still alive
            entry["held_s"] = max(0.0, heal["t"] - t0)
        # else: the stuck process ended without being released (its agent stopped it): how long is not recorded
        limit = min(t_rel, t_end)
        first = next(((t, what) for t, what in _marks(events, stuck_pids) if t0 < t <= limit), None)
        who = stuck_text(stuck)
        if first is not None:
            entry.update(outcome="noticed", detection_s=first[0] - t0, noticed_by=first[1],
                         why=f"noticed {first[0] - t0:.1f}s after {who} hung: {first[1]}")
        elif end is not None and end.get("reason") == EndReason.HUNG and t_rel >= t_end:
            entry.update(outcome="hung", why=f"{who} stuck since step {entry['since_step']} by the hang fault "
                         f"#{fid} ({mode}): nothing noticed in {t_end - t0:.1f}s, until the run was stopped")
        elif t_rel < t_end:
            entry.update(outcome="released", why=f"nothing noticed {who} stuck for {t_rel - t0:.1f}s; the job went "
                         "on when the hang was released")
        else:
            reason = end.get("reason") if end is not None else "no run_ended (incomplete history)"
            entry.update(outcome="unnoticed", why=f"nothing noticed {who} stuck for {min(t_end, t_rel) - t0:.1f}s "
                         f"before the run ended ({reason})" if end is not None else
                         f"not checked: the history ends without run_ended while {who} was stuck")
            if end is None:
                entry["outcome"] = "not_checked"
    return out


def add_hangs(faults: list[dict[str, Any]], events: list[Event]) -> dict[int, dict[str, Any]]:
    """Each fault with a hang gets ``hang`` (absent for other faults: their results keep their exact content)."""
    outcomes = hang_outcomes(events)
    for f in faults:
        if f["id"] in outcomes:
            f["hang"] = outcomes[f["id"]]
    return outcomes


def hung_cause(outcomes: dict[int, dict[str, Any]]) -> str | None:
    """For a ``hung`` run's why: the rank(s) a hang left stuck that nothing noticed."""
    hung = [o["why"] for o in outcomes.values() if o["outcome"] == "hung"]
    return "; ".join(hung) if hung else None


def single_point_lost(events: list[Event]) -> str | None:
    """For a run that did not finish: the disruptive fault that hit the node its launcher names as the job's single
    point of failure (run_started's environment: ``single_point_node``, ``single_point_of_failure``), or None.

    Under Ray the head holds the GCS, the controller and the driver: a crash of node0 ends the job whatever the
    restart policy says, and the run then stops on the stall timeout, whose words alone ("no step for 60s") do not
    say that the job could not have come back."""
    env = run_environment(events)
    node, words = env.get("single_point_node"), env.get("single_point_of_failure")
    if not node:
        return None
    hits = [e for e in of_kind(events, Ev.FAULT_INJECTED) if e.get("target") == node and e.get("disruptive", True)]
    if not hits:
        return None
    first = hits[0]
    return (f"{first.get('kind')} hit {node}, the job's single point of failure under the "
            f"{env.get('launcher', 'its')} launcher: {words or node}; no restart policy brings the job back from it")


def failed_after_last_step(events: list[Event]) -> str | None:
    """For a ``hung`` run's why: the nodes whose torchrun agent saw its workers fail after the last step any worker
    reached, or None.

    A worker that dies at the job's exit (seen in CI with a stock DDP script: "terminate called without an active
    exception", exit -6, after its last step and the final save) is restarted by its agent, which then waits in a
    new rendezvous round for nodes that finished and will never join: the job hangs although training ended. Said
    so, the hang reads as the job's exit-time crash it is, not as torch-chaos stopping it."""

    last = last_new_step(events)
    if last is None:
        return None
    top, reached = last
    if any(e["t"] >= reached for e in of_kind(events, Ev.FAULT_INJECTED)):
        return None  # a fault after the last step explains the failures
    nodes = sorted({str(e.get("node")) for e in of_kind(events, Ev.AGENT_WORKERS_FAILED) if e["t"] > reached})
    if not nodes:
        return None
    return (f"after step {top}, the last any worker reached, the workers of {', '.join(nodes)} failed and "
            f"{'its agent' if len(nodes) == 1 else 'their agents'} restarted them into a new rendezvous round that "
            "nodes done training never join (a crash at the job's exit? logs/<node>.log has the worker's error)")


def done_but_not_exited(events: list[Event], total: int | None) -> str | None:
    """For a run that ended ``hung`` or ``restart_loop`` after training every step: ``all steps done (N of N); K
    node(s) did not exit: ...``, each node with what its agent did after the last step. Where the job's step count
    is not known (a command workload without a golden run), torchrun's own word that a node's workers all exited 0
    after the last step (``agent_workers_succeeded``) says that training ended: ``training ended at step N (...)``.
    None when a step was missing, or when neither says training ended.

    Such a run is stopped by the stall timeout ("no step for 60s"), which alone reads as a job stuck in training:
    it is a job that trained to the end and then did not exit (a crash at exit restarted into a rendezvous round
    nobody joins, torchrun's exit barrier waiting for the agent of a node that was replaced, a process group never
    destroyed)."""

    last = last_new_step(events)
    if last is None:
        return None
    top, reached = last
    ends = of_kind(events, Ev.RUN_ENDED)
    t_end = ends[-1]["t"] if ends else math.inf
    succeeded = {str(e.get("node")): e for e in of_kind(events, Ev.AGENT_WORKERS_SUCCEEDED)
                 if reached <= e["t"] <= t_end}
    if total is not None and top < total:
        return None
    if total is None and not succeeded:
        return None
    started: dict[str, float] = {}
    for e in of_kind(events, Ev.NODE_STARTED):
        if e.get("role") in (None, "node") and e["t"] <= t_end:
            started[str(e.get("node"))] = e["t"]
    exited = {str(e.get("node")) for e in of_kind(events, Ev.NODE_EXITED)
              if started.get(str(e.get("node")), math.inf) <= e["t"] <= t_end}
    running = sorted(n for n in started if n not in exited)
    if not running:
        return None
    failed = {str(e.get("node")) for e in of_kind(events, Ev.AGENT_WORKERS_FAILED) if e["t"] > reached}
    # nodes started again after the last step: a replacement joins a new round that the nodes done training never
    # join; the ones still running from before sit in torchrun's exit barrier, waiting for the replaced node's agent
    replaced = {str(e.get("node")) for e in of_kind(events, Ev.NODE_STARTED)
                if e.get("replacement") and e.get("role") in (None, "node") and reached <= e["t"] <= t_end}

    def what(node: str) -> str:
        if node in failed:
            return (f"{node} (its workers failed after the last step and its agent restarted them into a new "
                    "rendezvous round)")
        if node in replaced:
            return (f"{node} (a replacement started after the last step, waiting in a new rendezvous round for "
                    "peers that finished training and will never join)")
        gone = ", ".join(f"{n}'s" for n in sorted(replaced - {node}))
        if node in succeeded:
            timeout = succeeded[node].get("barrier_timeout_s")
            return (f"{node} (its workers finished; its agent waits in torchrun's exit barrier"
                    f"{f', up to {timeout:g} s,' if isinstance(timeout, (int, float)) else ''} for every agent of "
                    f"the round{f', and {gone} was replaced' if gone else ''})")
        if gone:
            return (f"{node} (still running: torchrun's exit barrier waits for every agent of the round, and "
                    f"{gone} was replaced after the last step)")
        if succeeded:  # its agent, which says so for the others, never saw its workers all exit
            return (f"{node} (its workers did not all exit after the last step: one still runs, in a collective or "
                    f"with a process group never destroyed; the agent of {', '.join(sorted(succeeded))} waits for it "
                    "in torchrun's exit barrier)")
        return f"{node} (still running: in torchrun's exit barrier, or a process group never destroyed)"
    done = (f"all steps done ({top} of {total})" if total is not None else
            f"training ended at step {top} (torchrun's agent on {', '.join(sorted(succeeded))} saw every worker "
            "exit 0 after it)")
    return f"{done}; {len(running)} node(s) did not exit: " + ", ".join(what(n) for n in running)
