"""What the storage fault kinds share: a rule in the storage layer's ``rules.json``, installed on inject and
removed exactly on heal (docs/design.md, "The storage layer").

A storage fault does nothing by itself: it asks the storage layer (the FUSE server that serves the checkpoint
directory, ``chaos/storage/server.py``) to answer matching operations differently, through
:class:`chaos.storage.control.StorageControl` (``ctx.storage``). ``apply`` returns only once the server enforces
the rule, so ``t_f`` is when the fault really began; a server that never confirms makes the fault ``fault_failed``
instead of a fault that silently never acted.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema

from chaos.capabilities import STORAGE_LAYER
from chaos.faults.base import FaultContext, FaultKind
from chaos.spec import FaultSpec, Seconds

if TYPE_CHECKING:
    from chaos.scenario import Scenario
    from chaos.storage.control import StorageControl

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|kb|kib|mb|mib|gb|gib)?\s*(/s)?\s*$", re.IGNORECASE)
_UNIT = {None: 1, "b": 1, "kb": 10**3, "kib": 2**10, "mb": 10**6, "mib": 2**20, "gb": 10**9, "gib": 2**30}
# The operations a rule's ``ops`` may name (chaos.storage.rules.RULE_OPS); ``open`` covers both directions.
StorageOp = Literal["write", "fsync", "read", "rename", "open", "open_write", "open_read", "unlink"]
DEFAULT_OPS: list[str] = ["write", "fsync", "read", "rename", "open"]


def parse_size(value: Any) -> Any:
    """Accept ``1048576``, ``"512KiB"``, ``"10MB"``, ``"20MB/s"`` (bytes, or bytes per second); anything else is
    left for pydantic to reject with the field's name."""
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m is None:
            raise ValueError(f"expected a size such as 1048576, 512KiB or 10MB, got {value!r}")
        return int(float(m.group(1)) * _UNIT[m.group(2).lower() if m.group(2) else None])
    return value


# As chaos.spec.Seconds: the bound before the validator (a `minimum` in the JSON Schema), and a schema that admits
# what parse_size does (_SIZE without its IGNORECASE flag, which JSON Schema patterns do not have).
_SIZE_SCHEMA = {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*([bB]|[kKmMgG][iI]?[bB])?\s*(/s)?\s*$"}
Bytes = Annotated[int, Field(ge=0), BeforeValidator(parse_size),
                  WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0}, _SIZE_SCHEMA]})]
PositiveBytes = Annotated[int, Field(gt=0), BeforeValidator(parse_size),
                          WithJsonSchema({"anyOf": [{"type": "integer", "exclusiveMinimum": 0}, _SIZE_SCHEMA]})]


def relative_glob(value: str) -> str:
    """A storage fault's ``paths``: a glob relative to the checkpoint directory, which it cannot leave. An absolute
    path (``/etc/*``) or a ``..`` would only ever match nothing in the layer (the run passed with a fault that never
    acted), or, in a layer that took it at its word, files outside the run."""
    if not value.strip():
        return "*"
    if value.startswith("/"):
        raise ValueError(f"expected a glob relative to the checkpoint directory (e.g. *.pt or step_*/model.pt), "
                         f"got the absolute path {value!r}")
    if ".." in value.split("/"):
        raise ValueError(f"expected a glob relative to the checkpoint directory, inside it; {value!r} climbs out "
                         "of it with '..'")
    return value


RelativeGlob = Annotated[str, AfterValidator(relative_glob),
                         WithJsonSchema({"type": "string", "pattern": r"^(?!/)(?!(.*/)?\.\.(/|$)).*$"})]


def no_storage_layer() -> RuntimeError:
    return RuntimeError("the storage layer is not serving the checkpoint directory (no storage control in this "
                        "run), so a storage fault cannot act; it needs the storage layer (`chaos doctor`)")


def storage_of(ctx: FaultContext) -> StorageControl:
    storage = getattr(ctx, "storage", None)
    if storage is None:
        raise no_storage_layer()
    return storage


def install(ctx: FaultContext, rule: dict[str, Any], effect: str) -> StorageControl:
    """Install ``rule`` (``fault_id``, ``kind`` and the ``effect`` the kind declares added) and wait for the server;
    on failure take it back out, so a server that answers late never enforces a fault the history records as
    failed."""
    storage = storage_of(ctx)
    rule = {"fault_id": ctx.fault_id, "kind": ctx.spec.kind, "effect": effect, **rule}
    try:
        storage.apply(rule)
    except BaseException:
        withdraw(storage, ctx.fault_id)
        raise
    ctx.details.update({k: v for k, v in rule.items() if k not in ("fault_id", "kind", "effect", "report")},
                       rules_version=storage.version, enforced_by=storage.enforced_by)
    return storage


def withdraw(storage: StorageControl, fault_id: int) -> None:
    """Remove a rule whose installation failed, without waiting on a server that did not answer."""
    try:
        storage.remove(fault_id)
    except Exception:  # the rule is out of rules.json either way; the server is what failed
        pass


def where(rule_node: str | None, paths: str) -> str:
    return f"{paths} ({rule_node}'s operations only)" if rule_node else paths


class StorageFaultSpec(FaultSpec):
    """A rule on the checkpoint storage: it lasts ``duration``, or until the run ends when not given."""

    TARGET: ClassVar = "none"
    DURATION: ClassVar = "optional"
    duration: Seconds | None = Field(None, description="how long the fault lasts (default: until the run ends)")
    paths: RelativeGlob = Field("*", description="glob on the file name relative to the checkpoint directory (`*` also "
                       "matches `/`), e.g. *.pt")
    node: int | None = Field(None, ge=0, description="only operations of this node's processes (default: every "
                             "node's; the checkpoint storage is shared)")

    @classmethod
    def target_hint(cls) -> str:
        return "storage faults act on the checkpoint storage; `node: N` limits one to node N's operations"


class StorageFault(FaultKind):
    """An impairment of the checkpoint storage: installed as a rule, removed exactly on heal."""

    kind: ClassVar[str] = ""
    # What the storage layer does with the operations the rule matches: one of chaos.storage.rules.EFFECTS (quota,
    # error, slow, stall_fsync, power_loss), declared here so that the layer never needs the kind's name.
    layer_effect: ClassVar[str] = ""
    needs: ClassVar[frozenset[str]] = frozenset({STORAGE_LAYER})
    targets_node: ClassVar[bool] = False
    lasts_until_healed: ClassVar[bool] = True

    @classmethod
    def check(cls, spec: Any, scenario: Scenario) -> list[str]:
        nodes = scenario.cluster.nodes
        if spec.node is not None and spec.node >= nodes:
            return [f"node: node {spec.node} does not exist (the cluster has nodes 0..{nodes - 1})"]
        return []

    def rule(self, ctx: FaultContext) -> dict[str, Any]:
        """The kind's own rule fields (beyond ``fault_id``, ``kind``, ``paths``, ``node``)."""
        return {}

    def text(self, ctx: FaultContext, node: str | None) -> str:
        """What the rule does, for the mechanism (``writes to *.pt fail with ENOSPC``)."""
        raise NotImplementedError

    def inject(self, ctx: FaultContext) -> str:
        spec = ctx.spec
        node = None if spec.node is None else f"node{spec.node}"
        storage = install(ctx, {"paths": spec.paths, "node": node, **self.rule(ctx)}, self.layer_effect)
        return f"storage layer rule ({storage.described()}): {self.text(ctx, node)}"

    def heal(self, ctx: FaultContext) -> dict[str, Any]:
        storage = storage_of(ctx)
        storage.remove(ctx.fault_id)
        healed: dict[str, Any] = {"restored": ctx.fault_id not in storage.rules, "rules_version": storage.version}
        matched = storage.matched(ctx.fault_id)
        if matched is not None:  # 0: the rule never met an operation, the fault never acted (not injected)
            healed["matched"] = matched
        return healed

    @classmethod
    def generated_duration(cls, draw: Any, bounds: Any) -> float:
        from hypothesis import strategies as st

        low, high = bounds.durations
        return draw(st.integers(int(low * 10), int(high * 10))) / 10
