"""The ``workload`` section of a scenario: a shipped reference workload or the user's own command.

Kept apart from :mod:`chaos.scenario` (which is built from the plug-in registry) so that the plan and the
runtimes, which plug-ins import, can read a workload without the scenario model.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Discriminator, Field, Tag, WithJsonSchema, model_validator

from chaos.progress_regex import compile_progress
from chaos.progress_regex import error as progress_error
from chaos.spec import Strict
from chaos.workload_args import SHIPPED

# YAML reads `[python, train.py, --epochs, 10]` with an int in it; a command line is strings.
# A command's argument: YAML reads `[train.py, --steps, 40]` with a number in it, which is taken as its text; the
# schema says so too (an editor must not flag what the loader accepts).
Arg = Annotated[str, BeforeValidator(lambda v: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool)
                                     else v), WithJsonSchema({"type": ["string", "number"]})]


def _no_nul(value: str) -> str:
    """A NUL cannot be carried by a command line or an environment (the OS ends the string there, and Python's
    ``subprocess`` refuses it with a ValueError deep in the engine): refused at the field instead."""
    if "\0" in value:
        raise ValueError("contains a NUL character, which no environment variable can carry")
    return value


# A workload.env value: as Arg (a number is taken as its text), and never a NUL (its error names workload.env.NAME).
EnvValue = Annotated[Arg, AfterValidator(_no_nul)]


def _args_schema(schema: dict[str, Any]) -> None:
    """``workload.args`` in ``chaos schema``: the shipped workload's declared arguments (chaos.workload_args)."""
    schema.pop("additionalProperties", None)
    # every shipped workload's arguments (the loader checks them against the named workload's own list)
    properties: dict[str, Any] = {}
    for declared in SHIPPED.values():
        for name, arg in declared.items():
            one = arg.json_schema()
            seen = properties.get(name)
            if seen is None or seen == one:
                properties[name] = one
            elif "anyOf" in seen:
                seen["anyOf"].append(one)
            else:
                properties[name] = {"anyOf": [seen, one]}
    schema["properties"] = properties
    schema["additionalProperties"] = False


class ShippedWorkload(Strict):
    name: Literal["ddp-mlp", "ray-mlp", "tf-mlp", "flower-mlp"] = Field(
        description="a reference workload shipped in workloads/: ddp-mlp (train.py, torchrun or one process), "
        "ray-mlp (ray_train.py, launcher: ray), tf-mlp (tf_train.py, launcher: tf-multiworker), flower-mlp "
        "(flower_train.py, launcher: flower)")
    args: dict[str, str | int | float | bool] = Field(
        default_factory=dict, json_schema_extra=_args_schema,
        description="command-line arguments, e.g. {steps: 800, checkpoint_every: 50}; declared in "
        "chaos/workload_args.py")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What torch-chaos sets in every node's environment itself (beside CHAOS_*), and where a scenario sets it instead.
RESERVED_ENV = {
    "OMP_NUM_THREADS": "cluster.threads_per_proc",
    "PYTHONUNBUFFERED": "always 1, so progress lines arrive as printed",
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "cluster.share_rendezvous_store",
    "GLOO_SOCKET_IFNAME": "the runtime's interface, on netns and docker",
    "NCCL_SOCKET_IFNAME": "the runtime's interface, on netns and docker",
}


class CommandWorkload(Strict):
    """A user's own training command; the plan runs it in the run directory (relative paths start there)."""

    command: list[Arg] = Field(min_length=1, description="the training command; torchrun wraps it in elastic mode")
    progress_regex: str = Field(description="regex with a named group 'step' (and optionally 'loss')")
    checkpoint_dir: str | None = None
    env: dict[str, EnvValue] = Field(
        default_factory=dict, description="environment variables for every worker, on top of the engine's own "
        "environment (local, netns) and of what torch-chaos sets (CHAOS_*, OMP_NUM_THREADS, ...), which they may "
        "not replace; part of the golden cache key")

    @model_validator(mode="after")
    def _check(self) -> CommandWorkload:
        try:
            pattern = compile_progress(self.progress_regex)
        except progress_error as exc:
            raise ValueError(f"progress_regex is not a valid regular expression: {exc}") from None
        if "step" not in pattern.groupindex:
            raise ValueError("progress_regex needs a named group 'step', e.g. 'step (?P<step>\\d+)'")
        for name in self.env:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"env: {name!r} is not an environment variable name (letters, digits, _"
                                 + ("; it contains a NUL character)" if "\0" in name else ")"))
            if name.startswith("CHAOS_") or name in RESERVED_ENV:
                raise ValueError(f"env: {name} is set by torch-chaos ({RESERVED_ENV.get(name, 'its own marks')}) "
                                 "and cannot be given here")
        return self


def _workload_kind(value: Any) -> str:
    """Pick the workload form from its keys, so errors speak of one form instead of both."""
    if isinstance(value, dict):
        return "CommandWorkload" if "command" in value else "ShippedWorkload"
    return "CommandWorkload" if isinstance(value, CommandWorkload) else "ShippedWorkload"


Workload = Annotated[
    Annotated[ShippedWorkload, Tag("ShippedWorkload")] | Annotated[CommandWorkload, Tag("CommandWorkload")],
    Discriminator(_workload_kind),
]


