"""Launchers: how a job's processes start on each node (torchrun, one process, a Ray cluster)."""
