"""The package version, in a module of its own: the engine records it in every history, and importing it from
``chaos`` (whose ``run`` imports the engine) would make a cycle."""

__version__ = "0.1.0"
