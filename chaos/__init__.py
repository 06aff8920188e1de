"""torch-chaos: chaos testing for PyTorch training jobs.

Kept import-light on purpose: :mod:`chaos.probe` is imported inside training processes and containers, so
``import chaos`` must not pull in pydantic, rich or the engine. ``chaos.run`` loads them on first use.
"""

from __future__ import annotations

from typing import Any

from chaos.version import __version__

__all__ = ["__version__", "run"]


def run(scenario: Any, out_dir: str = "runs", on_update: Any = None) -> Any:
    """Run a scenario (a path, a shipped name or a :class:`chaos.scenario.Scenario`); returns a
    :class:`chaos.run_result.RunResult` (result.json's content, ``result.verdict`` etc., ``result.run_dir``)."""
    # lazy: `import chaos` must stay light (the probe runs in training processes); run() is the engine's entry
    from chaos.engine import run as _run

    return _run(scenario, out_dir=out_dir, on_update=on_update)
