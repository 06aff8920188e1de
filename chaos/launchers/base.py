"""What a launcher plug-in is (entry point group ``torch_chaos.launchers``): how a job's processes start.

A runtime says *where* nodes live (processes, namespaces, containers, a scheduler); a launcher says *what runs on
them*: torchrun's elastic agent on every node, one supervised process, a Ray cluster with the user's driver on its
head. The launcher builds each node's command (:meth:`Launcher.node_plans`), names the orchestrator of restarts
(torchrun's agent, the engine's ``node_restart``, Ray's ``FailureConfig``), refuses the faults that do not apply to
it with the reason, picks a node's worker processes for ``kill_worker``, and says what ``chaos doctor`` checks and
what ``chaos cleanup`` removes. A new launcher is one module plus its workload; the engine, the runtimes and the
analysis do not name launchers. See docs/design.md, "Extension points".

Import-light on purpose, like the other plug-in bases: the registry imports launcher modules while the scenario
model is being built, so nothing here may import :mod:`chaos.scenario` at run time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from chaos.registry import LAUNCHERS, register_base

if TYPE_CHECKING:
    import psutil
    from pydantic import BaseModel

    from chaos.machine import Check
    from chaos.plan import Addressing, NodePlan
    from chaos.scenario import Scenario


@dataclass
class LaunchContext:
    """What every launcher builds its nodes from: the plan's shared parts, resolved once by chaos.plan."""

    scenario: Scenario
    run_id: str
    run_dir: Path
    net: Addressing
    # The environment every node gets (the history channel, the spool, pauses, OMP threads, the workload's own).
    base_env: dict[str, str]
    # The workload's command (a shipped workload's script with its arguments, or workload.command as written).
    script: list[str]
    # The resolved elastic settings (chaos.plan.elastic_settings): timeouts a launcher may pass on to its workers.
    settings: dict[str, Any]
    # node name → the cores it is pinned to (absent: not pinned)
    pinned: dict[str, list[int]] = field(default_factory=dict)

    @property
    def python(self) -> str:
        return self.net.python


@dataclass
class Launch:
    """The processes a launcher asks the runtime to start: the nodes, and for torchrun a dedicated store and the
    rendezvous backend's servers (started first, never replaced)."""

    nodes: list[NodePlan]
    store: NodePlan | None = None
    servers: list[NodePlan] = field(default_factory=list)
    store_port: int | None = None


class Launcher(ABC):
    name: ClassVar[str]
    summary: ClassVar[str] = ""
    # result.json's and run_started's ``mode``: the family the launcher belongs to (torchrun: elastic, process:
    # centralized, ray: ray). ``cluster.mode`` is still accepted and names the built-in launcher of its family.
    mode: ClassVar[str]
    # Who brings a failed job back, in words for reports and the dry run.
    orchestrator: ClassVar[str] = ""
    # Whether the job rendezvous through torchrun's rendezvous (a c10d store or a backend's servers): targets
    # ``store``, ``rendezvous_host`` and etcd servers, and the cluster.rendezvous section, mean something only then.
    rendezvous: ClassVar[bool] = False
    # Whether the job runs on exactly one node (the centralized process).
    single_node: ClassVar[bool] = False
    # The runtimes it runs on (None: every runtime); validation refuses the others with the reason.
    runtimes: ClassVar[frozenset[str] | None] = None
    # fault kind → why it does not apply to jobs of this launcher (validation refuses it with these words).
    refused_faults: ClassVar[dict[str, str]] = {}
    # The node whose loss ends the job whatever the restart policy says, in words (None: there is none), and its
    # name where it is always the same node (the analysis names it when a run that hit it did not finish).
    single_point_of_failure: ClassVar[str | None] = None
    single_point_node: ClassVar[str | None] = None
    # What bounds the recovery's phases under this launcher, in words the recovery breakdown cites from the history
    # ("detection", "restart": the phases chaos.analysis.breakdown names when a job has no torchrun agent).
    levers: ClassVar[dict[str, str]] = {}
    # The launcher's own scenario options, written as ``cluster.<name>: {...}`` (None: it takes none).
    options: ClassVar[type[BaseModel] | None] = None
    # The file the framework rewrites beside the checkpoints when it commits one it will resume from (None: a
    # checkpoint is resumable once its save finished). Written into the plan: the verdicts count a checkpoint as
    # one a restart could load only once a save of this file followed it (chaos.analysis.ckpt_source).
    checkpoint_commit_file: ClassVar[str | None] = None

    @classmethod
    def layout(cls, cluster: Any) -> str:
        """How a node's processes are laid out (chaos.faults.base.LAYOUTS for the built-ins): fault kinds say which
        layouts they can act on. A launcher of its own kind answers its name."""
        return cls.name

    @classmethod
    def image_packages(cls) -> tuple[str, ...]:
        """pip requirements a container node needs beyond the node image's torch (the docker runtime builds the
        image with them on first use); none by default."""
        return ()

    @classmethod
    def scenario_problems(cls, scenario: Scenario) -> list[str]:
        """What this launcher cannot accept in a scenario each section alone accepts (``field: why`` lines)."""
        return []

    @classmethod
    def machine_checks(cls) -> list[Check]:
        """What this machine must have to run jobs of this launcher (``chaos doctor``; a failing one stops a run)."""
        return []

    @classmethod
    def cleanup(cls, run_id: str | None, only_orphans: bool) -> list[str]:
        """Remove what this launcher's runs left outside their process trees (``chaos cleanup``); idempotent.
        The processes themselves carry the run's marks and go with the runtime's cleanup."""
        return []

    @abstractmethod
    def node_plans(self, ctx: LaunchContext) -> Launch:
        """Every process the job needs, with its exact command line and environment (what the dry run prints)."""

    def select_workers(self, tree: list[psutil.Process], node_pid: int) -> list[psutil.Process]:
        """The worker processes of one node's tree (``kill_worker``'s targets); ``node_pid`` is the node's main
        process (a launcher's agent). Empty: the node process is its own worker. The default: everything under
        the node process (torchrun's workers)."""
        return [p for p in tree if p.pid != node_pid]

    def describe(self) -> dict[str, Any]:
        """What result.json's ``environment.launcher`` records."""
        return {"launcher": self.name, "mode": self.mode, "orchestrator": self.orchestrator,
                **({"levers": dict(self.levers)} if self.levers else {}),
                **({"single_point_of_failure": self.single_point_of_failure,
                    "single_point_node": self.single_point_node} if self.single_point_node else {})}


def _check_launcher(name: str, cls: type[Launcher]) -> str | None:
    if getattr(cls, "name", None) != name:
        return f"not a chaos.plugin.Launcher subclass named {name!r}"
    if not isinstance(getattr(cls, "mode", None), str):
        return f"the launcher {name!r} declares no mode (a string: the family result.json records)"
    return None


register_base(LAUNCHERS, Launcher, _check_launcher)
