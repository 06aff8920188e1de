"""Published failure rates a projection can start from (``--preset``): apart from the projection, so that the
command line lists their names without importing numpy (every ``chaos`` command builds the whole parser)."""

from __future__ import annotations

from dataclasses import dataclass

HOUR = 3600.0
DAY = 86400.0


@dataclass(frozen=True)
class Preset:
    """A published failure rate: interruptions observed on a number of GPUs over a number of days."""

    name: str
    citation: str
    interruptions: int
    days: float
    gpus: int
    gpus_per_node: int
    note: str

    @property
    def gpu_mtbf_s(self) -> float:
        return self.days * DAY * self.gpus / self.interruptions

    @property
    def node_mtbf_s(self) -> float:
        """A node fails when any of its GPUs does: per-GPU MTBF / GPUs per node."""
        return self.gpu_mtbf_s / self.gpus_per_node

    def derivation(self) -> list[str]:
        return [f"{self.interruptions} unexpected interruptions in {self.days:g} days on {self.gpus:,} GPUs "
                f"({self.citation})",
                f"per-GPU MTBF = {self.days:g} d × 24 h × {self.gpus:,} / {self.interruptions} = "
                f"{self.gpu_mtbf_s / HOUR:,.0f} GPU-hours",
                f"per-node MTBF = per-GPU MTBF / {self.gpus_per_node} GPUs per node = "
                f"{self.node_mtbf_s / HOUR:,.0f} h ({self.note})"]


PRESETS: dict[str, Preset] = {
    "llama3": Preset(
        name="llama3",
        citation="\"The Llama 3 Herd of Models\", Meta, 2024, arXiv:2407.21783, section 3.3.4 and Table 5",
        interruptions=419, days=54, gpus=16_384, gpus_per_node=8,
        note="8 H100 GPUs per server in the paper; the 419 exclude the 47 planned interruptions; every "
             "interruption is charged to one GPU's failure rate"),
}
