"""What a fault kind or a rendezvous backend may need from a runtime (``needs``), and what a runtime gives
(``Runtime.capabilities``): names only, so the scenario model, the fault kinds and the runtimes share them without
importing each other."""

# What a fault kind may need from a runtime (FaultKind.needs), and what each means.
KILL = "kill"
KILL_WORKERS = "kill_workers"
FREEZE = "freeze"
NODE_NETWORK = "node_network"
CHECKPOINT_STORAGE = "checkpoint_storage"
STORAGE_LAYER = "storage_layer"
MEMORY_CGROUP = "memory_cgroup"
CPU_QUOTA = "cpu_quota"
RENDEZVOUS_SERVERS = "rendezvous_servers"
HOST_LOSS = "host_loss"
LAYER_OUTLIVES_NODE = "layer_outlives_node"
# Each reads after "needs a runtime that ..." (the refusal's sentence: chaos/scenario.py).
CAPABILITIES = {
    KILL: "can SIGKILL a node's whole process tree",
    KILL_WORKERS: "can kill a node's worker processes and leave its launcher alive",
    FREEZE: "can stop every process of a node and resume it later",
    NODE_NETWORK: "gives each node a network stack of its own (a namespace the engine can enter with host tools)",
    CHECKPOINT_STORAGE: "keeps the checkpoint directory reachable from the engine's host",
    STORAGE_LAYER: "shows the nodes the storage layer's FUSE mount of the checkpoint directory",
    MEMORY_CGROUP: "runs a node's processes as host processes the engine can put under a memory cgroup limit",
    CPU_QUOTA: "can cap a node's CPU time and give it back exactly: its own CPU quota (cpu_quota/set_cpu_quota, a "
               "container's), or host processes (node_pids) the engine moves into a cpu cgroup of its own",
    RENDEZVOUS_SERVERS: "runs a rendezvous backend's servers (etcd members) where every node reaches them: on the "
    "loopback the nodes share (local), or each with an address of its own on the nodes' network (netns, docker)",
    LAYER_OUTLIVES_NODE: "keeps the storage layer, which holds a node's writes not yet synced, alive through a crash "
    "of the node (it runs beside the node, not inside the node's Slurm step)",
    HOST_LOSS: "can lose a node's whole host at once (and return it), which needs root on the host or on what runs it",
}
