"""Deprecated name of :mod:`chaos.analysis.result_json`, kept until every importer uses the new one."""

from chaos.analysis.result_json import (  # noqa: F401
    RESULT_SCHEMA_VERSION,
    analyze,
    build_result,
    evaluate_checkpoint_expectations,
    evaluate_expectations,
    write_result,
)
