"""``chaos schema``: the scenario JSON Schema, for editors."""

from __future__ import annotations

import argparse
import json

from chaos import scenario as scenario_model
from chaos.run_result import EXIT_PASS


def main(args: argparse.Namespace) -> int:
    """Print the scenario JSON Schema, built from the installed plug-ins."""
    print(json.dumps(scenario_model.model().model_json_schema(), indent=2))
    return EXIT_PASS
