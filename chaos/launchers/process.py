"""The centralized launcher: one node, the training script run by the engine, which is its orchestrator.

With ``procs_per_node: 1`` the script runs alone (no launcher process, the interpreter's own options work as
written); with more, ``torchrun --standalone`` starts its workers on the one node. A failure is handled by the
engine's ``node_restart`` policy, as a Kubernetes Job or a Slurm requeue would.
"""

from __future__ import annotations

from typing import Any

from chaos.launchers.base import Launch, LaunchContext, Launcher
from chaos.plan import NodePlan, is_python, python_script


class Process(Launcher):
    name = "process"
    summary = "a centralized job: one node, the script (or torchrun --standalone) restarted by the engine"
    mode = "centralized"
    orchestrator = "the engine (cluster.node_restart)"
    single_node = True
    # node0 is the only node, but the engine's node_restart brings it back: not a loss the job cannot survive
    single_point_of_failure = "node0 (the only node; cluster.node_restart restarts it)"

    @classmethod
    def layout(cls, cluster: Any) -> str:
        return "standalone" if cluster.procs_per_node > 1 else "single"

    def node_plans(self, ctx: LaunchContext) -> Launch:
        c, script, python = ctx.scenario.cluster, ctx.script, ctx.python
        if c.procs_per_node == 1:
            # one plain process: the interpreter's own options (python -c, -m) work as written
            argv = [python, *(script if script[0].endswith(".py") else script[1:])] if is_python(script) else script
        else:
            # torchrun starts a script: `[python, train.py]` would make it run a file named "python"
            argv = [python, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc-per-node={c.procs_per_node}", *python_script(script)]
        node = NodePlan("node0", 0, argv, {**ctx.base_env, "CHAOS_NODE": "node0"}, cpus=ctx.pinned.get("node0"))
        return Launch([node])
