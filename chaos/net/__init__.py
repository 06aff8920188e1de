"""Network faults that work without sch_netem: NFQUEUE-based delay and friends."""
