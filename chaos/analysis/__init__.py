"""Analysis: metrics and verdicts computed from a run's history alone (never imports runtimes or the engine)."""
