"""Federated figures of a run, from the rounds its server recorded (``launcher: flower``, docs/flower.md).

A federated job's unit of progress is a round, not an optimizer step: the server reports each round as one
``fl_round`` (its results, failures, sampled clients, whether it aggregated, the evaluation loss and accuracy) and
one ``step_completed`` (``step`` = the round: what the engine's progress and triggers count). From
them: rounds completed (aggregated) and failed (nothing came back), the results and failures of each round, the
clients each sampled, rounds executed again (a restarted server that did not resume), the time from each fault to
the next completed round, the rounds a server crash cost, and the final evaluation against the fault-free (golden)
run. A history without ``fl_round`` (every other launcher) has no federated figures: :func:`federated_metrics`
answers None, and result.json carries no ``federated`` key.
"""

from __future__ import annotations

from typing import Any

from chaos.analysis.ckpt_source import run_environment
from chaos.analysis.load import of_kind
from chaos.events import EndReason, Ev
from chaos.history import Event


def round_rows(events: list[Event]) -> list[dict[str, Any]]:
    """One row per executed round, in the order the server ran them (a redone round appears again)."""
    rows = []
    for e in of_kind(events, Ev.FL_ROUND):
        rows.append({"round": int(e["round"]), "t": float(e["t"]),
                     "results": int(e.get("results") or 0), "failures": int(e.get("failures") or 0),
                     "sampled": list(e.get("sampled") or []),
                     "failed_clients": list(e.get("failure_nodes") or []),
                     "errors": list(e.get("errors") or []),
                     "aggregated": bool(e.get("aggregated", bool(e.get("results")))),
                     "eval_loss": e.get("eval_loss"), "eval_accuracy": e.get("eval_accuracy"),
                     "pid": e.get("pid")})
    return sorted(rows, key=lambda r: r["t"])


def _final_of(events: list[Event]) -> dict[str, Any] | None:
    finished = [e for e in of_kind(events, Ev.RUN_FINISHED) if "eval_loss" in e or "eval_accuracy" in e]
    if not finished:
        return None
    last = finished[-1]
    return {"round": last.get("step"), "eval_loss": last.get("eval_loss"), "eval_accuracy": last.get("eval_accuracy")}


def golden_quality(golden: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str | None]:
    """(the fault-free run's final round, evaluation loss and accuracy, or None, why not)."""
    if not golden:
        return None, "no golden run (checks.golden is off, or it did not finish)"
    final = golden.get("federated_final")
    if isinstance(final, dict):
        return final, None
    losses = golden.get("losses") or {}
    if not losses:
        return None, "the golden run recorded no round"
    last = max(losses, key=int)
    return {"round": int(last), "eval_loss": losses[last], "eval_accuracy": None}, None


def federated_metrics(events: list[Event], golden: dict[str, Any] | None = None,
                      planned_rounds: int | None = None) -> dict[str, Any] | None:
    """result.json's ``federated`` section, or None for a run whose server recorded no round."""
    rows = round_rows(events)
    if not rows and not any(e.get("launcher") == "flower" for e in of_kind(events, Ev.PROCESS_STARTED)):
        return None
    env = run_environment(events)
    server = env.get("single_point_node") or "node0"
    done: set[int] = set()
    redone = 0
    for r in rows:
        if r["aggregated"]:
            if r["round"] in done:
                redone += 1
            done.add(r["round"])
    ends = of_kind(events, Ev.RUN_ENDED)
    completed = bool(ends) and ends[-1].get("reason") == EndReason.COMPLETED
    last = max(done) if done else 0
    faults = []
    server_hit = None
    for f in of_kind(events, Ev.FAULT_INJECTED):
        t = float(f["t"])
        nxt = next((r for r in rows if r["t"] > t and r["aggregated"]), None)
        before = max((r["round"] for r in rows if r["t"] <= t and r["aggregated"]), default=0)
        affected = [r["round"] for r in rows if r["t"] > t and (r["failures"] or not r["aggregated"])
                    and (nxt is None or r["t"] <= nxt["t"] or f.get("target") in r["failed_clients"])]
        one = {"fault_id": f.get("fault_id"), "kind": f.get("kind"), "target": f.get("target"),
               "round_before": before, "next_completed_round": nxt["round"] if nxt else None,
               "to_next_round_s": round(nxt["t"] - t, 3) if nxt else None,
               "rounds_with_failures": sorted(set(affected)),
               "server": f.get("target") == server}
        if nxt is None:
            one["why"] = "no round completed after it"
        faults.append(one)
        if one["server"] and server_hit is None:
            server_hit = one
    lost = None
    lost_why = None
    if server_hit is not None:
        if planned_rounds is not None and not completed:
            lost = max(planned_rounds - last, 0)
            lost_why = (f"the server ({server}) was lost after round {server_hit['round_before']} and training ended "
                        f"at round {last} of {planned_rounds}")
        else:
            lost = redone
            lost_why = (f"the restarted server ran {redone} round(s) again that had completed before the crash"
                        if redone else "the restarted server resumed at the next round")
    final = _final_of(events)
    if final is None and rows:
        tail = rows[-1]
        final = {"round": tail["round"], "eval_loss": tail["eval_loss"], "eval_accuracy": tail["eval_accuracy"]}
    gold, gold_why = golden_quality(golden)
    quality: dict[str, Any] = {"final": final, "golden": gold}
    if gold is not None and final is not None:
        for key in ("eval_loss", "eval_accuracy"):
            a, b = final.get(key), gold.get(key)
            quality[f"{key}_delta"] = round(a - b, 6) if isinstance(a, (int, float)) and isinstance(
                b, (int, float)) else None
    else:
        quality["why"] = gold_why if gold is None else "the run recorded no round"
    return {
        "server": server,
        "rounds_planned": planned_rounds,
        "rounds_completed": len(done),
        "last_round": last,
        "round_executions": len(rows),
        "rounds_failed": sum(1 for r in rows if not r["aggregated"]),
        "rounds_redone": redone,
        "client_failures": sum(r["failures"] for r in rows),
        "rounds_with_failures": sum(1 for r in rows if r["failures"]),
        "rounds": [{k: v for k, v in r.items() if k not in ("t", "pid")} | {"t": r["t"]} for r in rows],
        "faults": faults,
        "rounds_lost_to_server_crash": lost,
        **({"server_crash": lost_why} if lost_why else {}),
        "quality": quality,
    }


def server_ended_training(fed: dict[str, Any] | None, completed: bool) -> str | None:
    """For a federated run that did not finish after a fault on its server: why, in words (None otherwise)."""
    if not fed or completed or not fed.get("server_crash"):
        return None
    return (f"{fed['server_crash']}: the Flower server is the single point of failure of federated learning (its "
            "clients exit when it is gone, and Flower keeps no server state a restart could resume from unless the "
            "ServerApp saves and restores the global model)")


def expectation_values(fed: dict[str, Any] | None) -> dict[str, float | None]:
    """The values ``expect.federated`` bounds, by name (None: not measured)."""
    if fed is None:
        return {}
    nexts = [f["to_next_round_s"] for f in fed["faults"]]
    worst = max((v for v in nexts if v is not None), default=None)
    q = fed["quality"]
    final = q.get("final") or {}
    return {"rounds_completed": fed["rounds_completed"], "rounds_failed": fed["rounds_failed"],
            "client_failures": fed["client_failures"], "rounds_redone": fed["rounds_redone"],
            "rounds_lost": fed["rounds_lost_to_server_crash"],
            "to_next_round_s": None if any(v is None for v in nexts) else worst,
            "final_accuracy": final.get("eval_accuracy"),
            "accuracy_drop": -q["eval_accuracy_delta"] if q.get("eval_accuracy_delta") is not None else None,
            "loss_increase": q.get("eval_loss_delta")}


def text_lines(fed: dict[str, Any]) -> list[str]:
    """The report's federated section, one line each."""
    out = [f"federated: {fed['rounds_completed']} round(s) completed"
           + (f" of {fed['rounds_planned']}" if fed.get("rounds_planned") else "")
           + f", {fed['rounds_failed']} failed, {fed['client_failures']} client failure(s) in "
           f"{fed['rounds_with_failures']} round(s), {fed['rounds_redone']} redone"]
    for r in fed["rounds"]:
        out.append(f"  round {r['round']}: results {r['results']}, failures {r['failures']}"
                   + (f" ({', '.join(r['failed_clients'])})" if r["failed_clients"] else "")
                   + f", sampled {', '.join(r['sampled']) or '-'}"
                   + (f", eval loss {r['eval_loss']:.4f}" if isinstance(r["eval_loss"], (int, float)) else "")
                   + (f", accuracy {r['eval_accuracy']:.3f}" if isinstance(r["eval_accuracy"], (int, float)) else "")
                   + ("" if r["aggregated"] else " (failed: nothing aggregated)"))
    for f in fed["faults"]:
        out.append(f"  fault #{f['fault_id']} {f['kind']} on {f['target']}: after round {f['round_before']}, next "
                   + (f"completed round {f['next_completed_round']} {f['to_next_round_s']:.2f} s later"
                      if f["next_completed_round"] is not None else "completed round: none"))
    if fed.get("server_crash"):
        out.append(f"  server crash: {fed['server_crash']} (rounds lost: {fed['rounds_lost_to_server_crash']})")
    q = fed["quality"]
    final, gold = q.get("final"), q.get("golden")
    if final:
        line = f"  final model: eval loss {final.get('eval_loss')}, accuracy {final.get('eval_accuracy')}"
        if gold:
            line += (f"; fault-free run: eval loss {gold.get('eval_loss')}, accuracy {gold.get('eval_accuracy')}"
                     f" (delta loss {q.get('eval_loss_delta')}, accuracy {q.get('eval_accuracy_delta')})")
        else:
            line += f"; against the fault-free run: not checked ({q.get('why')})"
        out.append(line)
    return out
