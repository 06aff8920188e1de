"""Clusters in containers that torch-chaos brings up for tests, CI and anyone without one (``chaos cluster``).

Today one kind: ``slurm``, a Slurm 22.05 controller and N compute containers from Debian's packages on the node
image (:mod:`chaos.cluster.slurm`). A cluster outlives the command that made it, so it is not a run: its objects
carry ``torch-chaos.cluster*`` labels (never the docker runtime's ``torch-chaos`` run label) and a state file
(:mod:`chaos.cluster.spec`) describes it for whoever uses it next. See docs/design.md, "A Slurm cluster in
containers".
"""
