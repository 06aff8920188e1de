"""Lost writes: the node loses power, and what it wrote but never fsynced is gone (a lost page cache).

The node's whole tree is SIGKILLed (as ``crash`` does); then the storage layer cuts every file that node wrote
since its last fsync back to its length at that fsync (0 if never synced: the zero-length file a crash leaves on
ext4 after a rename without fsync). The layer tracks unsynced data from the start of the run, so nothing needs
arming. ``writeback_s`` models the kernel writing dirty data back on its own (Linux: ``dirty_expire_centisecs``,
30 s): data older than that survives; by default every unsynced byte is lost, the worst case a power loss allows.

A job whose checkpoints survive this fsyncs the checkpoint (and anything it needs to trust it, such as a digest
sidecar) before it reports the save done; one that does not reports saves that a power loss takes back, and the
checkpoint verdicts say so (``resumed_from_newest_valid``: the newest checkpoint the job reported was not there).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from chaos.capabilities import KILL, LAYER_OUTLIVES_NODE, STORAGE_LAYER
from chaos.faults.base import FaultContext, FaultKind
from chaos.faults.storagebase import RelativeGlob, install, storage_of, withdraw
from chaos.spec import FaultSpec, Seconds


class LostWritesOptions(FaultSpec):
    kind: Literal["lost_writes"]
    paths: RelativeGlob = Field("*", description="only files matching this glob (relative to the checkpoint directory) "
                       "lose their unsynced data")
    writeback_s: Seconds | None = Field(None, description="data written at least this long before the power loss "
                                        "had been written back by the kernel and survives (Linux default: 30s); "
                                        "default: every unsynced byte is lost")


class LostWrites(FaultKind):
    kind = "lost_writes"
    # The storage layer's effect of its rule (chaos.storage.rules.EFFECTS): the power loss, applied once at install.
    layer_effect = "power_loss"
    options = LostWritesOptions
    summary = "power loss of the node: its tree is SIGKILLed and data it never fsynced is cut away"
    needs = frozenset({KILL, STORAGE_LAYER, LAYER_OUTLIVES_NODE})
    colour = "#ff7f0e"

    def inject(self, ctx: FaultContext) -> str:
        assert ctx.node is not None
        storage = storage_of(ctx)  # before the kill: without the layer nothing happens at all
        killed = ctx.runtime.kill(ctx.node)
        report = storage.directory / f"lost_writes-{ctx.fault_id}.json"
        report.unlink(missing_ok=True)
        try:
            install(ctx, {"paths": ctx.spec.paths, "node": ctx.node, "writeback_s": ctx.spec.writeback_s,
                          "report": str(report)}, self.layer_effect)
            said = json.loads(report.read_text())
            cut = said["truncated"]
        except Exception as exc:
            withdraw(storage, ctx.fault_id)
            raise RuntimeError(f"{ctx.node} was killed ({killed}), but the storage layer reported no power "
                               f"loss ({type(exc).__name__}: {exc})") from None
        refused = [c for c in cut if c.get("refused")]
        if refused:  # a file reached only through a link (or with hard links): never cut, the fault did not happen
            storage.remove(ctx.fault_id)
            raise RuntimeError(f"{ctx.node} was killed ({killed}), but the storage layer refused to cut "
                               + "; ".join(f"{c['path']}: {c['error']}" for c in refused))
        if ctx.spec.paths != "*" and said.get("matched") == 0:
            storage.remove(ctx.fault_id)
            raise RuntimeError(f"{ctx.node} was killed ({killed}), but paths {ctx.spec.paths!r} matched no file the "
                               "job wrote in the checkpoint directory: the power loss had nothing to act on")
        # One-shot: the power loss happened at install; the rule has nothing left to enforce.
        storage.remove(ctx.fault_id)
        lost = sum(c.get("bytes", 0) - c.get("kept", 0) for c in cut)
        ctx.details.update(truncated=cut, bytes_lost=lost)
        files = ", ".join(f"{c['path']} {c.get('bytes')}->{c.get('kept')} B" for c in cut) or "no unsynced file"
        return f"{killed}; storage layer cut {ctx.node}'s unsynced data ({lost} bytes): {files}"

    @classmethod
    def generate(cls, draw: Any, bounds: Any) -> dict[str, Any]:
        return {}
