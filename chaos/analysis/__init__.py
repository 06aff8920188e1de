"""Analysis: every metric and verdict, computed from a run's history alone (never imports runtimes or the engine).

- ``run``: :func:`analyze_run` parses a run directory once and computes everything below into a ``RunAnalysis``;
  result.json, every report format and ``chaos compare`` present that one object.
- ``load``: the streaming parse (``load_events``) and the ``History`` index (events by kind, memoised derived
  structures such as the steps, step spans and lineage).
- ``steps``: the ``StepTable``, every step event as one typed column per field the metrics read.
- ``metrics``: per-fault recovery, catch-up, lost steps/work, slowdown; goodput; restarts.
- ``verdict``: the checker protocol (``Verdict``, ``Checker``, ``Compose``): a check that raises or sees nothing is
  "not checked", never ok.
- ``checkpoints``: the four checkpoint-correctness checkers and the surviving lineage.
- ``breakdown``: recovery split into phases; ``interval``: checkpoint-interval advice (Young/Daly);
  ``throughput``: pace and cost figures; ``series``: downsampled plot series.
- ``result_json``: builds and writes result.json (expectations, verdict), the one serializer;
  ``result_model``: the one loader (``ResultModel``, ``FaultResult``; ``RESULT_SCHEMA_VERSION``): every reader of a
  result reads its figures by attribute.
"""
