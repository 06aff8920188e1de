"""The elastic launcher: torchrun's agent on every node, which is the orchestrator of worker restarts.

Every node runs torchrun (through chaos.agent_log, so the agent's own steps reach the history) with the resolved
rendezvous settings; the rendezvous store lives in node 0's agent or in a dedicated store process, or in the
rendezvous backend's servers (etcd). The engine's ``node_restart`` replaces a node whose agent exited.
"""

from __future__ import annotations

from typing import Any

from chaos.agent_log import launcher as agent_launcher
from chaos.launchers.base import Launch, LaunchContext, Launcher
from chaos.plan import REPO_ROOT, STORE_NODE, NodePlan, python_script
from chaos.registry import rendezvous_backend


class Torchrun(Launcher):
    name = "torchrun"
    summary = "an elastic job: torchrun's agent on every node, workers regrouped by its rendezvous"
    mode = "elastic"
    orchestrator = "torchrun's elastic agents (--max-restarts), nodes replaced by cluster.node_restart"
    rendezvous = True
    single_point_of_failure = "the rendezvous store's host (node0, or the dedicated store)"

    @classmethod
    def layout(cls, cluster: Any) -> str:
        return "elastic"

    def node_plans(self, ctx: LaunchContext) -> Launch:
        c, net, settings, python = ctx.scenario.cluster, ctx.net, ctx.settings, ctx.python
        port = net.store_port
        store_host = STORE_NODE if c.rendezvous.store == "dedicated" else "node0"
        endpoint = f"{net.addresses[store_host]}:{port}"
        backend = rendezvous_backend(c.rendezvous.backend)
        servers: list[NodePlan] = []
        if backend.server_prefix is not None:
            servers = backend.servers(run_id=ctx.run_id, run_dir=ctx.run_dir,
                                      members=c.rendezvous.members or backend.default_members,
                                      addresses=net.addresses)
            endpoint = backend.endpoint(servers)
        store: NodePlan | None = None
        if c.rendezvous.store == "dedicated":
            # Like the agents' launcher: the repository goes on sys.path inside the command, so the store starts
            # from the run directory whether or not torch-chaos is installed as a package.
            code = (f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); from chaos.store_server import main; "
                    "sys.exit(main(sys.argv[1:]))")
            store = NodePlan(STORE_NODE, None, [python, "-c", code, "--host", net.addresses[STORE_NODE],
                                                "--port", str(port)],
                             {"CHAOS_RUN_ID": ctx.run_id, "CHAOS_NODE": STORE_NODE, "PYTHONUNBUFFERED": "1"},
                             role="store")
        min_nodes = c.min_nodes or c.nodes
        env = dict(ctx.base_env)
        if not settings["share_rendezvous_store"]:
            env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        script_argv = python_script(ctx.script)
        nodes = []
        for i in range(c.nodes):
            is_host = c.rendezvous.store == "node0" and i == 0
            # torchrun itself, with its agent's steps written to the history (chaos.agent_log)
            argv = [*agent_launcher(python, str(REPO_ROOT)),
                    f"--nnodes={min_nodes}:{c.nodes}", f"--nproc-per-node={c.procs_per_node}",
                    *backend.torchrun_args(endpoint=endpoint, run_id=ctx.run_id, is_host=is_host, settings=settings),
                    f"--max-restarts={settings['max_restarts']}",
                    f"--local-addr={net.addresses[f'node{i}']}", *script_argv]
            nodes.append(NodePlan(f"node{i}", i, argv, {**env, "CHAOS_NODE": f"node{i}"},
                                  cpus=ctx.pinned.get(f"node{i}")))
        return Launch(nodes, store, servers, port)
