"""The storage layer: the checkpoint directory served through a FUSE passthrough that torch-chaos owns.

See docs/design.md, "The storage layer". ``rules`` decides what each operation suffers under the active storage
faults (pure, no I/O but lost-writes truncation); ``control`` is the engine's side of the rules file.
"""
