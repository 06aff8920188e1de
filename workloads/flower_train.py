"""Reference federated job for torch-chaos: Flower (``flwr``) FedAvg over a tiny PyTorch model, synthetic data.

One process per node (``launcher: flower``): node0 runs the Flower server (``FLOWER_ROLE=server``), every other node
one client (``FLOWER_ROLE=client``); both connect at ``FLOWER_SERVER_ADDRESS`` (``host:port``, written by the
launcher). It uses Flower's ``start_server`` / ``start_client`` (gRPC, one process per participant, no SuperLink
state database): the deployment mode that maps one node to one process, which is what the engine's faults act on.

A round: the server samples ``--clients-per-round`` of the connected clients (Flower's ``ClientManager.sample``),
each trains ``--local-steps`` SGD steps on its own shard from the global model, and FedAvg averages what came back.
A client that dies mid-round is a *failure* of that round (``accept_failures``: the round still aggregates the
others); a frozen one is a failure once ``--pg-timeout-s`` (``ServerConfig.round_timeout``) passes. A round with no
result is a *failed round* (nothing aggregated). After every round the server evaluates the global model on a
held-out set of its own (centralized evaluation) and reports the round through ``chaos.probe`` as one
``fl_round`` (the round's results, failures, the clients it sampled, the evaluation loss and accuracy) and one
``step_completed`` (``step`` = the round, ``loss`` = the evaluation loss: the engine's progress, triggers and stall
timeout count rounds); and prints one line of the same (``round N results=R failures=F ...``).

The server saves the global model (and the round) after each round, atomically, in ``--checkpoint-dir``; a
restarted server (the engine's ``cluster.node_restart``: Flower itself restarts nothing) resumes from the newest
one, so training continues at the next round. Without a restart, the server is the single point of failure: its
clients lose their connection and exit, and nothing trains again.

``--bug NAME`` plants one resume mistake, so the checkers can be shown to catch it:
  ignore-saved-model   a restarted server ignores the saved global model: it starts again at round 1 from fresh
                       weights (the saves go on, so the history shows the rounds redone)
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
try:
    from chaos import probe
    from chaos.workload_args import FLOWER_MLP, add_arguments
except ImportError:  # the script also runs where torch-chaos is not installed: telemetry is then off
    sys.path.insert(0, str(HERE.parent))
    from chaos import probe
    from chaos.workload_args import FLOWER_MLP, add_arguments

CKPT_PREFIX = "global-round-"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p, FLOWER_MLP)
    p.add_argument("--role", choices=("server", "client"), default=os.environ.get("FLOWER_ROLE"))
    p.add_argument("--server-address", default=os.environ.get("FLOWER_SERVER_ADDRESS", "127.0.0.1:8080"))
    return p.parse_args(argv)


# --------------------------------------------------------------------------- model and data

def make_model(args: argparse.Namespace) -> Any:
    import torch

    torch.manual_seed(args.seed)
    return torch.nn.Sequential(torch.nn.Linear(args.features, args.hidden), torch.nn.Tanh(),
                               torch.nn.Linear(args.hidden, 2))


def make_data(args: argparse.Namespace, part: int) -> tuple[Any, Any]:
    """Shard ``part`` (1..: a client's; 0: the server's held-out set) of one synthetic two-class problem: the same
    labelling rule everywhere (from ``--data-seed``), the samples differ per shard."""
    import torch

    rule = torch.Generator().manual_seed(args.data_seed)
    w = torch.randn(args.features, generator=rule)
    gen = torch.Generator().manual_seed(args.data_seed * 1000 + part)
    x = torch.randn(args.samples_per_client, args.features, generator=gen)
    y = ((x @ w + 0.3 * torch.randn(args.samples_per_client, generator=gen)) > 0).long()
    return x, y


def get_weights(model: Any) -> list[Any]:
    return [t.detach().cpu().numpy() for t in model.state_dict().values()]


def set_weights(model: Any, weights: list[Any]) -> None:
    import torch

    keys = list(model.state_dict().keys())
    model.load_state_dict({k: torch.tensor(w) for k, w in zip(keys, weights, strict=True)})


def evaluate(model: Any, x: Any, y: Any) -> tuple[float, float]:
    import torch

    with torch.no_grad():
        out = model(x)
        loss = float(torch.nn.functional.cross_entropy(out, y))
        acc = float((out.argmax(1) == y).float().mean())
    return loss, acc


def weights_digest(weights: list[Any]) -> str:
    return hashlib.sha256(b"".join(w.tobytes() for w in weights)).hexdigest()


# --------------------------------------------------------------------------- the server's saved global model

def newest_checkpoint(ckpt_dir: Path) -> Path | None:
    found = sorted(ckpt_dir.glob(f"{CKPT_PREFIX}*.npz"), key=lambda p: int(p.stem[len(CKPT_PREFIX):]))
    return found[-1] if found else None


def save_checkpoint(ckpt_dir: Path, rnd: int, weights: list[Any], keep: int) -> None:
    """Write ``global-round-<rnd>.npz`` atomically (temporary, fsync, rename), keep the newest ``keep``."""
    import numpy as np

    path = ckpt_dir / f"{CKPT_PREFIX}{rnd}.npz"
    probe.checkpoint_save_started(rnd, str(path))
    buf = io.BytesIO()
    np.savez(buf, round=np.array(rnd), **{f"arr_{i}": w for i, w in enumerate(weights)})
    data = buf.getvalue()
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    probe.checkpoint_save_finished(rnd, str(path), hashlib.sha256(data).hexdigest(), bytes=len(data))
    for old in sorted(ckpt_dir.glob(f"{CKPT_PREFIX}*.npz"), key=lambda p: int(p.stem[len(CKPT_PREFIX):]))[:-keep]:
        old_round = int(old.stem[len(CKPT_PREFIX):])
        old.unlink(missing_ok=True)
        probe.checkpoint_deleted(old_round, str(old))


def load_checkpoint(path: Path) -> tuple[int, list[Any]]:
    import numpy as np

    rnd = int(path.stem[len(CKPT_PREFIX):])
    probe.checkpoint_load_started(rnd, str(path))
    data = path.read_bytes()
    with np.load(io.BytesIO(data)) as z:
        weights = [z[f"arr_{i}"] for i in range(len(z.files) - 1)]
        rnd = int(z["round"])
    probe.checkpoint_loaded(rnd, str(path), hashlib.sha256(data).hexdigest())
    return rnd, weights


# --------------------------------------------------------------------------- server

def run_server(args: argparse.Namespace) -> int:
    import random

    import flwr as fl
    from flwr.common import ndarrays_to_parameters

    random.seed(args.seed)  # Flower's ClientManager.sample draws with `random`
    ckpt_dir = Path(args.checkpoint_dir).resolve()
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    model = make_model(args)
    start = 0
    newest = newest_checkpoint(ckpt_dir)
    if newest is not None and args.bug != "ignore-saved-model":
        start, weights = load_checkpoint(newest)
        set_weights(model, weights)
    if start >= args.rounds:
        print(f"flower_train: server found round {start} saved, nothing left to train", flush=True)
        probe.run_finished(start, state_sha256=weights_digest(get_weights(model)))
        return 0
    x_test, y_test = make_data(args, 0)
    names: dict[str, str] = {}  # Flower's client id (its gRPC peer) -> the node it runs on (from its metrics)
    state: dict[str, Any] = {"t_round": time.perf_counter(), "final": None}

    def node_of(proxy: Any) -> str:
        return names.get(proxy.cid, proxy.cid)

    class Recorded(fl.server.strategy.FedAvg):  # type: ignore[misc]
        """FedAvg that records each round: who was sampled, what came back, the centralized evaluation."""

        def configure_fit(self, server_round: int, parameters: Any, client_manager: Any) -> Any:
            chosen = super().configure_fit(server_round, parameters, client_manager)
            state["sampled"] = [proxy for proxy, _ in chosen]
            state["t_round"] = time.perf_counter()
            return chosen

        def aggregate_fit(self, server_round: int, results: Any, failures: Any) -> Any:
            for proxy, res in results:
                node = res.metrics.get("node")
                if isinstance(node, str):
                    names[proxy.cid] = node
            state["results"] = [node_of(p) for p, _ in results]
            # a failure is (proxy, result) or a bare exception (a stream closed, a round timeout): the nodes sampled
            # that returned nothing are the failed ones
            got = {p.cid for p, _ in results}
            missing = [node_of(p) for p in state.get("sampled", []) if p.cid not in got]
            state["failures"] = missing if len(missing) == len(failures) else [
                node_of(f[0]) if isinstance(f, tuple) else type(f).__name__ for f in failures]
            state["errors"] = sorted({type(f[1] if isinstance(f, tuple) else f).__name__ for f in failures})
            return super().aggregate_fit(server_round, results, failures)

    def central_eval(server_round: int, weights: list[Any], config: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        set_weights(model, weights)
        loss, acc = evaluate(model, x_test, y_test)
        if server_round == 0:  # Flower's evaluation of the initial model, before round 1
            return loss, {"accuracy": acc}
        rnd = start + server_round
        sampled = [node_of(p) for p in state.get("sampled", [])]
        results, failures = state.get("results", []), state.get("failures", [])
        aggregated = bool(results)
        print(f"flower_train: round {rnd} results={len(results)} failures={len(failures)} "
              f"sampled={','.join(sampled)} eval_loss={loss:.6f} accuracy={acc:.4f}"
              + ("" if aggregated else " (failed: nothing aggregated)"), flush=True)
        duration = time.perf_counter() - state["t_round"]
        if aggregated:  # saved before the round is reported: a fault triggered by the round finds it on disk
            save_checkpoint(ckpt_dir, rnd, weights, args.keep)
        probe.emit("fl_round", round=rnd, results=len(results), failures=len(failures), sampled=sampled,
                   result_nodes=results, failure_nodes=failures, errors=state.get("errors", []),
                   aggregated=aggregated, eval_loss=loss, eval_accuracy=acc, duration_s=duration)
        probe.step_completed(rnd, loss=loss, samples=len(results) * args.samples_per_client, duration_s=duration)
        state["final"] = (rnd, loss, acc, weights)
        for key in ("results", "failures", "errors", "sampled"):
            state.pop(key, None)
        return loss, {"accuracy": acc}

    strategy = Recorded(fraction_fit=1e-9, min_fit_clients=args.clients_per_round,
                        min_available_clients=args.clients_per_round, fraction_evaluate=0.0,
                        min_evaluate_clients=0, evaluate_fn=central_eval, accept_failures=True,
                        initial_parameters=ndarrays_to_parameters(get_weights(model)),
                        on_fit_config_fn=lambda r: {"round": start + r})
    timeout = args.pg_timeout_s if args.pg_timeout_s > 0 else None
    fl.server.start_server(server_address=args.server_address, strategy=strategy,
                           config=fl.server.ServerConfig(num_rounds=args.rounds - start, round_timeout=timeout))
    final = state["final"]
    if final is None:
        print("flower_train: server ran no round", file=sys.stderr, flush=True)
        return 1
    rnd, loss, acc, weights = final
    probe.run_finished(rnd, state_sha256=weights_digest(weights), eval_loss=loss, eval_accuracy=acc,
                       first_round=start + 1)
    print(f"flower_train: server finished {rnd} rounds eval_loss={loss:.6f} accuracy={acc:.4f}", flush=True)
    return 0


# --------------------------------------------------------------------------- client

def run_client(args: argparse.Namespace) -> int:
    import flwr as fl
    import torch

    node = os.environ.get("CHAOS_NODE", "client")
    part = int(os.environ.get("RANK", "1"))
    x, y = make_data(args, part)
    model = make_model(args)

    class Client(fl.client.NumPyClient):  # type: ignore[misc]
        def get_parameters(self, config: dict[str, Any]) -> list[Any]:
            return get_weights(model)

        def fit(self, parameters: list[Any], config: dict[str, Any]) -> tuple[list[Any], int, dict[str, Any]]:
            set_weights(model, parameters)
            opt = torch.optim.SGD(model.parameters(), lr=args.lr)
            gen = torch.Generator().manual_seed(args.data_seed + 7919 * int(config.get("round", 0)) + part)
            for _ in range(args.local_steps):
                idx = torch.randint(0, len(x), (args.batch,), generator=gen)
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
                loss.backward()
                opt.step()
                if args.step_time_ms > 0:
                    time.sleep(args.step_time_ms / 1000.0)
            return get_weights(model), len(x), {"node": node, "loss": float(loss)}

    try:
        fl.client.start_client(server_address=args.server_address, client=Client().to_client(), insecure=True,
                               max_wait_time=args.connect_timeout_s)
    except Exception as exc:  # the server went away: Flower's client does not outlive its server
        print(f"flower_train: client {node} lost the server: {type(exc).__name__}: {str(exc)[:300]}",
              file=sys.stderr, flush=True)
        return 1
    print(f"flower_train: client {node} done", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.role is None:
        print("flower_train: no role (FLOWER_ROLE=server|client, or --role)", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    probe.set_context(incarnation=f"{os.environ.get('CHAOS_NODE', 'local')}-{os.getpid()}-{time.time_ns()}")
    probe.process_started(distributed=True, launcher="flower", role=args.role)
    return run_server(args) if args.role == "server" else run_client(args)


if __name__ == "__main__":
    sys.exit(main())
