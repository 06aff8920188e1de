"""A team's incident history (``chaos project --incidents FILE.csv``): their node MTBF and recovery, from their data.

A toy run on this machine cannot say how often a 1,024-node job fails; the team's own history can. One CSV row per
failure of their job, with a header:

- ``timestamp`` (required): ISO 8601 (``2026-03-01T04:12:00Z``) or seconds since the epoch;
- ``nodes`` (optional): how many nodes the job ran on when it failed (else ``--incidents-nodes N``);
- ``downtime`` (optional): how long the job was down for that failure, seconds or a duration (``12m``).

Rate: the history is observed from its first failure to its last, so it holds k = rows − 1 inter-failure times
(the first failure only opens the window). The exposure is Σ Δtᵢ × nodesᵢ node-seconds (each interval ending at
row i counted at that row's node count) and the node MTBF is exposure / k (the maximum-likelihood estimate for a
Poisson process). Its uncertainty from a finite count is exact for a failure-truncated observation: the rate
per node-second is Gamma(k, 1/exposure), so 2k·MTBF_true/MTBF_hat is χ²(2k); :mod:`projection_uncertainty`
draws from it. Recovery: the mean downtime, with the rows' spread.
"""

from __future__ import annotations

import csv
import itertools
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from chaos.paths import shown
from chaos.spec import parse_duration

TIMESTAMP, NODES, DOWNTIME = ("timestamp", "time", "date"), ("nodes", "node_count"), ("downtime", "downtime_s")
MAX_ROWS = 1_000_000  # an incident history of a million failures is a wrong file, not a history


class IncidentError(ValueError):
    """A CSV the projection cannot read: the message names the file, line and column."""


@dataclass(frozen=True)
class IncidentHistory:
    """What a CSV of failures says: their count, the node-hours they were observed over, the downtimes."""

    path: str
    rows: int
    failures_counted: int  # rows − 1: the first failure opens the observed window
    exposure_node_s: float
    span_s: float  # first to last failure
    downtimes_s: tuple[float, ...] = ()

    @property
    def node_mtbf_s(self) -> float:
        return self.exposure_node_s / self.failures_counted

    @property
    def mean_downtime_s(self) -> float | None:
        return sum(self.downtimes_s) / len(self.downtimes_s) if self.downtimes_s else None

    def derivation(self) -> list[str]:
        lines = [f"{self.rows} failures in {shown(self.path)} from the first to the last, {self.span_s / 86400:.4g} "
                 f"days: {self.failures_counted} inter-failure intervals over {self.exposure_node_s / 3600:,.0f} "
                 "node-hours (Σ interval × nodes)",
                 f"per-node MTBF = {self.exposure_node_s / 3600:,.0f} node-h / {self.failures_counted} = "
                 f"{self.node_mtbf_s / 3600:,.0f} h"]
        if self.downtimes_s:
            lines.append(f"recovery = mean downtime of {len(self.downtimes_s)} failure(s) = "
                         f"{self.mean_downtime_s:.4g} s")
        return lines


def _column(header: list[str], names: tuple[str, ...]) -> int | None:
    lowered = [h.strip().lower() for h in header]
    return next((lowered.index(n) for n in names if n in lowered), None)


def _timestamp(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    stamp = datetime.fromisoformat(text.strip())  # ValueError names nothing useful: the caller says what it wants
    if stamp.tzinfo is None:
        raise ValueError("no time zone")
    return stamp.timestamp()


def _seconds(text: str) -> float:

    value = parse_duration(text.strip()) if not _is_number(text) else float(text)
    if not isinstance(value, float) or not math.isfinite(value) or value < 0:
        raise ValueError(text)
    return value


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_incidents(path: str | Path, default_nodes: int | None = None) -> IncidentHistory:
    """Read and check the CSV; every problem is an IncidentError naming ``file:line``, the column and the value."""
    where = shown(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:  # -sig: a spreadsheet's export starts with a BOM
            table = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise IncidentError(f"--incidents {where}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    if not table or not any(cell.strip() for cell in table[0]):
        raise IncidentError(f"--incidents {where}:1: empty; expected a header line with a 'timestamp' column "
                            "(and optionally 'nodes', 'downtime')")
    header = table[0]
    t_col, n_col, d_col = _column(header, TIMESTAMP), _column(header, NODES), _column(header, DOWNTIME)
    if t_col is None:
        raise IncidentError(f"--incidents {where}:1: no 'timestamp' column in the header ({', '.join(header)}); "
                            "one row per failure: timestamp[,nodes][,downtime]")
    if n_col is None and default_nodes is None:
        raise IncidentError(f"--incidents {where}:1: no 'nodes' column: say how many nodes the job ran on, with a "
                            "'nodes' column or --incidents-nodes N")
    if len(table) - 1 > MAX_ROWS:
        raise IncidentError(f"--incidents {where}: {len(table) - 1:,} rows, more than {MAX_ROWS:,}")
    rows: list[tuple[float, int, float | None]] = []
    for line, row in enumerate(table[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue

        def cell(col: int, name: str, line: int = line, row: list[str] = row) -> str:
            if col >= len(row) or not row[col].strip():
                raise IncidentError(f"--incidents {where}:{line}: column {col + 1} ({name}) is empty")
            return row[col].strip()

        text = cell(t_col, header[t_col])
        try:
            t = _timestamp(text)
        except (ValueError, OverflowError, OSError):
            raise IncidentError(f"--incidents {where}:{line}: column {t_col + 1} ({header[t_col]}): expected an "
                                "ISO 8601 time with a zone (2026-03-01T04:12:00Z) or epoch seconds, got "
                                f"{text!r}") from None
        nodes = default_nodes
        if n_col is not None:
            text = cell(n_col, header[n_col])
            if not text.isdigit() or int(text) < 1:
                raise IncidentError(f"--incidents {where}:{line}: column {n_col + 1} ({header[n_col]}): expected a "
                                    f"whole number of nodes ≥ 1, got {text!r}")
            nodes = int(text)
        down = None
        if d_col is not None and d_col < len(row) and row[d_col].strip():
            text = row[d_col].strip()
            try:
                down = _seconds(text)
            except ValueError:
                raise IncidentError(f"--incidents {where}:{line}: column {d_col + 1} ({header[d_col]}): expected "
                                    f"seconds or a duration such as 12m, got {text!r}") from None
        assert nodes is not None
        rows.append((t, nodes, down))
    if len(rows) < 2:
        raise IncidentError(f"--incidents {where}: {len(rows)} failure row(s); a rate needs at least 2 (the first "
                            "opens the observed window, each later one is an interval between failures)")
    rows.sort(key=lambda r: r[0])
    exposure = sum((b[0] - a[0]) * b[1] for a, b in itertools.pairwise(rows))
    span = rows[-1][0] - rows[0][0]
    if not exposure > 0:
        raise IncidentError(f"--incidents {where}: every failure has the same timestamp: no time was observed")
    return IncidentHistory(path=str(path), rows=len(rows), failures_counted=len(rows) - 1, exposure_node_s=exposure,
                           span_s=span, downtimes_s=tuple(r[2] for r in rows if r[2] is not None))
