"""The engine playing the orchestrator: start the nodes, watch their exit codes, replace failed ones as the
scenario's ``node_restart`` policy says (like Kubernetes or Slurm would), and stop replacing once the job is done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chaos.engine.states import NODE_TRANSITIONS, NodeStatus, move
from chaos.events import Ev
from chaos.history import HistoryWriter
from chaos.plan import STORE_NODE, Plan
from chaos.runtimes.base import Runtime
from chaos.scenario import NodeRestart


@dataclass
class NodeState:
    """One training node as the live view shows it; ``status`` changes only through :meth:`move_to`."""

    name: str
    status: NodeStatus = NodeStatus.PENDING
    exit_code: int | None = None
    replacements: int = 0
    restart_at: float | None = None

    def move_to(self, status: NodeStatus) -> None:
        self.status = move(self.status, status, NODE_TRANSITIONS)


class NodeOrchestrator:
    """Owns the nodes' states; the dedicated rendezvous store (when the plan has one) is started and watched, and
    faults may freeze or kill it (``target: store``), but it is never replaced: torchrun's agents keep their
    rendezvous state in it, and a fresh store would hold none of it (docs/design.md, "Store faults")."""

    def __init__(self, runtime: Runtime, plan: Plan, policy: NodeRestart, history: HistoryWriter,
                 note: Callable[[str], None]):
        self._runtime = runtime
        self._plan = plan
        self._policy = policy
        self._history = history
        self._note = note
        self.nodes = {n.name: NodeState(n.name) for n in plan.nodes}
        self.store = NodeState(STORE_NODE) if plan.store is not None else None
        # A rendezvous backend's own servers (etcd members): started first, watched, never replaced, like the store.
        self.servers = {n.name: NodeState(n.name) for n in getattr(plan, "servers", [])}
        # When the first node exited with 0: the job is finishing, failed nodes are no longer replaced.
        self.finishing_since: float | None = None

    def status(self, name: str) -> NodeStatus:
        return self.nodes[name].status

    def store_status(self) -> NodeStatus | None:
        """The dedicated store's state (None without one): running, frozen by a fault, or dead once it exited."""
        return self.store.status if self.store is not None else None

    def service_status(self, name: str) -> NodeStatus | None:
        """The state of the store or of a rendezvous server by name (None for a training node)."""
        state = self._service(name)
        return state.status if state is not None else None

    def _service(self, name: str | None) -> NodeState | None:
        return self.store if name == STORE_NODE else self.servers.get(name) if name is not None else None

    def start_cluster(self) -> None:
        for server in getattr(self._plan, "servers", []):
            self._runtime.start_node(server)
            self.servers[server.name].move_to(NodeStatus.RUNNING)
            self._history.write(Ev.NODE_STARTED, node=server.name, role=server.role, argv=server.argv)
        if self._plan.store is not None:
            self._runtime.start_node(self._plan.store)
            assert self.store is not None
            self.store.move_to(NodeStatus.RUNNING)
            self._history.write(Ev.NODE_STARTED, node=STORE_NODE, role="store", argv=self._plan.store.argv)
        for node in self._plan.nodes:
            self._start_node(node.name, replacement=False)

    def _start_node(self, name: str, replacement: bool) -> None:
        node = self._plan.node(name)
        self._runtime.start_node(node)
        state = self.nodes[name]
        state.move_to(NodeStatus.RUNNING)
        state.exit_code, state.restart_at = None, None
        self._history.write(Ev.NODE_STARTED, node=name, replacement=replacement, argv=node.argv)
        self._note(f"{'replaced' if replacement else 'started'} {name}")

    def stopped(self, name: str) -> None:
        """A fault that stops the node (``stops_node``) took effect on it."""
        state = self._service(name) or self.nodes.get(name)
        if state is not None and state.status is NodeStatus.RUNNING:
            state.move_to(NodeStatus.FROZEN)

    def resumed(self, name: str | None) -> None:
        """A fault on the node was healed: a node still frozen by it runs again (one that exited stays as it is)."""
        state = self._service(name) or (self.nodes.get(name) if name is not None else None)
        if state is not None and state.status is NodeStatus.FROZEN:
            state.move_to(NodeStatus.RUNNING)

    def watch(self, now: float) -> None:
        """Start due replacements, then record every node that exited since the last tick."""
        policy = self._policy
        for name, state in self.nodes.items():
            if state.status is NodeStatus.REPLACING and state.restart_at is not None and now >= state.restart_at:
                if self.finishing_since is None:
                    state.replacements += 1
                    self._start_node(name, replacement=True)
                continue
            if state.status not in (NodeStatus.RUNNING, NodeStatus.FROZEN):
                continue
            code = self._runtime.exit_code(name)
            if code is None:
                continue
            state.exit_code = code
            if code == 0:
                state.move_to(NodeStatus.FINISHED)
                self.finishing_since = self.finishing_since or now
                self._history.write(Ev.NODE_EXITED, node=name, code=code)
                self._note(f"{name} finished")
                continue
            replace = (policy.policy == "on-failure" and state.replacements < policy.max_restarts
                       and self.finishing_since is None)
            # The policy says replace, but there may be nowhere to: its host is lost and no spare is left (the
            # job goes on without it, shrinking if min_nodes allows).
            can_replace = getattr(self._runtime, "can_replace", None)  # a runtime without spares: always
            no_place = can_replace(name) if replace and can_replace is not None else None
            replace = replace and no_place is None
            state.move_to(NodeStatus.REPLACING if replace else NodeStatus.DEAD)
            state.restart_at = now + policy.delay_s if replace else None
            self._history.write(Ev.NODE_EXITED, node=name, code=code, will_replace=replace,
                                **({"not_replaced": no_place} if no_place else {}))
            self._note(f"{name} exited with code {code}" + (f", replacing in {policy.delay_s:g}s" if replace else
                                                            f", not replaced: {no_place}" if no_place else ""))
        self._watch_store()

    def _watch_store(self) -> None:
        services = ([self.store] if self.store is not None else []) + list(self.servers.values())
        for state in services:
            if state.status not in (NodeStatus.RUNNING, NodeStatus.FROZEN):
                continue
            code = self._runtime.exit_code(state.name)
            if code is None:
                continue
            state.exit_code = code
            state.move_to(NodeStatus.DEAD)
            role = "store" if state is self.store else "server"
            self._history.write(Ev.NODE_EXITED, node=state.name, code=code, role=role)
            self._note(f"rendezvous {'store' if role == 'store' else 'server ' + state.name} exited with code {code}")
