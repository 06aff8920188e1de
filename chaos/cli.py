"""The ``torch-chaos`` / ``chaos`` command: a thin face over the library (run, validate, report …).

This module is the argument parser and the dispatch only: each subcommand's handler is ``main(args)`` of its own
module, ``chaos.commands.<name>`` (chaos/commands/), imported when that subcommand is chosen. So ``chaos --help``,
``import chaos.cli`` and a light command load nothing of what a heavy one needs (the engine, the analysis,
matplotlib, hypothesis), while each handler imports its dependencies at its top.

Exit codes: 0 pass, 1 fail (a failed expectation, hung, restart loop: the job broke), 2 invalid input or usage,
3 error (the test did not happen: a planned fault never fired, the engine failed, the job never started or
recorded no step), 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from chaos.analysis.projection_presets import PRESETS
from chaos.commands import EXIT_INTERRUPTED, claim_process, err, error, scenario_errors
from chaos.loading import ScenarioInvalid
from chaos.paths import GOLDEN_CACHE_ENV
from chaos.run_result import EXIT_PASS, EXIT_USAGE
from chaos.version import __version__


def _count(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high] (each is a real run: a budget of a million is a mistake)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {low} to {high}, got {value}")
        return value

    return parse


def _format_name(aliases: dict[str, str]) -> Callable[[str], str]:
    """``--format`` as argparse's ``type``: one spelling of Markdown per command was a usage error waiting to happen
    (``report`` said ``md``, ``project`` said ``markdown``), so each accepts the other's."""
    return lambda value: aliases.get(value, value)


RUNTIME_HELP = ("run on this runtime instead of the scenario's cluster.runtime (local, netns, docker, slurm or a "
                "plug-in), e.g. `chaos run quickstart --runtime docker`")


GOLDEN_CACHE_HELP = ("where golden runs are cached by content (default: $TORCH_CHAOS_GOLDEN_CACHE, else "
                     "$XDG_CACHE_HOME/torch-chaos/golden or ~/.cache/torch-chaos/golden)")


@contextlib.contextmanager
def _golden_cache(directory: str | None) -> Iterator[None]:
    """``--golden-cache DIR`` is ``TORCH_CHAOS_GOLDEN_CACHE=DIR`` for this command (explore and compare create their
    engines themselves; the golden cache reads the variable)."""
    if directory is None:
        yield
        return
    old = os.environ.get(GOLDEN_CACHE_ENV)
    os.environ[GOLDEN_CACHE_ENV] = str(Path(directory).resolve())
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(GOLDEN_CACHE_ENV, None)
        else:
            os.environ[GOLDEN_CACHE_ENV] = old


def _projection_options(p: argparse.ArgumentParser) -> None:
    """The options of a projection to scale (``chaos project``, ``chaos report --project-nodes``)."""

    p.add_argument("--mtbf-node", default=None, metavar="DURATION",
                   help="per-node mean time between failures, e.g. 10000h (job MTBF = this / nodes)")
    p.add_argument("--incidents", default=None, metavar="FILE.csv",
                   help="your failure history instead of --mtbf-node: one row per failure, header timestamp"
                        "[,nodes][,downtime]; gives the node MTBF (and its uncertainty) and, with downtimes, the "
                        "recovery")
    p.add_argument("--incidents-nodes", type=int, default=None, metavar="N",
                   help="nodes the job of --incidents ran on, when the CSV has no nodes column")
    p.add_argument("--preset", default=None, choices=sorted(PRESETS),
                   help="a published failure rate instead of --mtbf-node (llama3: 419 unexpected interruptions in "
                        "54 days on 16,384 GPUs, The Llama 3 Herd of Models, 2024)")
    p.add_argument("--job-days", type=float, default=30.0, help="failure-free training time of the projected job "
                   "in days (default 30)")
    p.add_argument("--checkpoint-interval", default=None, metavar="DURATION|Nsteps",
                   help="the job's checkpoint interval, e.g. 30m or 500steps (default: the run's checkpoint_every)")
    p.add_argument("--save-s", "--checkpoint-cost", dest="checkpoint_cost", default=None, metavar="DURATION",
                   help="blocking cost of one checkpoint at your model size and storage (default: the run's measured "
                        "median save)")
    p.add_argument("--recovery-s", "--recovery", dest="recovery", default=None, metavar="DURATION",
                   help="cost of one recovery at scale (default: fitted from several runs, else the run's mean "
                        "measured recovery_s)")
    p.add_argument("--step-s", default=None, metavar="DURATION",
                   help="your step time (default: the run's median step); converts Nsteps intervals")
    p.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node, for lost GPU-hours (default 8)")
    p.add_argument("--price-per-gpu-hour", type=float, default=None, metavar="PRICE",
                   help="price of one GPU-hour, for the cost of the lost GPU-hours")
    p.add_argument("--trials", type=int, default=1000, help="Monte Carlo jobs per interval (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="Monte Carlo seed (default 0)")


def _version() -> str:
    """The installed distribution's version (what pip installed), else the package's own."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch-chaos")
    except PackageNotFoundError:
        return __version__


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand and its options; the handler of each is ``chaos.commands.<name>.main`` (``handler``)."""
    p = argparse.ArgumentParser(prog="torch-chaos", description="Chaos testing for PyTorch training jobs.")
    p.add_argument("--version", action="version", version=f"torch-chaos {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a scenario and measure recovery")
    r.add_argument("scenario", help="a scenario file, or the name of a shipped scenario (see `chaos list`)")
    r.add_argument("--out", default="runs", help="directory for run directories (default: runs)")
    r.add_argument("--dry-run", action="store_true", help="print the resolved plan and run nothing")
    r.add_argument("--json", action="store_true", help="print result.json (or the plan) as JSON")
    r.add_argument("--golden-cache", default=None, metavar="DIR", help=GOLDEN_CACHE_HELP)
    r.add_argument("--runtime", default=None, help=RUNTIME_HELP)
    v = sub.add_parser("validate", help="check scenario files and report every error")
    v.add_argument("files", nargs="+")
    v.add_argument("--no-machine", dest="machine", action="store_false",
                   help="check the files only, not whether this machine can run them")
    v.add_argument("--runtime", default=None, help=RUNTIME_HELP)
    sub.add_parser("schema", help="print the scenario JSON Schema (for editors)")
    ls = sub.add_parser("list", help="list the shipped scenarios")
    ls.add_argument("--long", action="store_true", help="each scenario's whole description")
    pl = sub.add_parser("plugins", help="list the installed fault kinds, runtimes and rendezvous backends")
    pl.add_argument("--json", action="store_true")
    rep = sub.add_parser("report", help="recompute a run's result from its directory; write a report")
    rep.add_argument("run_dir")
    rep.add_argument("--format", type=_format_name({"markdown": "md"}), choices=["text", "html", "md", "json", "junit"],
                     default="text", help="md or markdown: the same Markdown report")
    rep.add_argument("-o", "--output", default=None, help="report path (default: inside the run directory)")
    rep.add_argument("--mtbf", default=None, help="mean time between failures for interval advice, e.g. 6h")
    rep.add_argument("--project-nodes", type=int, default=None, metavar="N",
                     help="add a 'Projection to scale' section for N nodes (see `chaos project --help`)")
    _projection_options(rep)
    pj = sub.add_parser("project", help="project a run's measured recovery and checkpoint cost to N nodes: "
                        "effective training time, lost hours, best checkpoint interval (Monte Carlo + Young/Daly)")
    pj.add_argument("run_dir", nargs="+", help="a run directory; several runs of the same job at different node "
                    "counts fit how recovery grows with N (the first gives the checkpoint cost and step time)")
    pj.add_argument("--nodes", type=int, required=True, help="nodes of the projected job")
    _projection_options(pj)
    pj.add_argument("--format", type=_format_name({"md": "markdown"}), choices=["text", "json", "markdown"],
                    default="text", help="md or markdown: the same Markdown tables")
    pj.add_argument("--all-intervals", action="store_true", help="list every swept interval, not only the "
                    "current, Young's, Daly's and the best")
    x = sub.add_parser("explore", help="search for a failing fault plan and shrink it to a minimal reproducer")
    x.add_argument("scenario")
    x.add_argument("--budget", type=_count(1, 10_000), default=10, help="fault plans to generate (each is a real run)")
    x.add_argument("--seed", type=int, default=0)
    x.add_argument("--shrink-budget", type=_count(0, 20_000), default=None,
                   help="runs allowed for shrinking (default 2x budget)")
    x.add_argument("--out", default="runs")
    x.add_argument("--json", action="store_true")
    x.add_argument("--no-confirm", action="store_true", help="do not replay the reproducer")
    x.add_argument("--golden-cache", default=None, metavar="DIR", help=GOLDEN_CACHE_HELP)
    x.add_argument("--runtime", default=None, help=RUNTIME_HELP)
    cmp = sub.add_parser("compare", help="run scenarios side by side and write the comparison table")
    cmp.add_argument("items", nargs="+", help="scenario files (or run directories with --from-runs)")
    cmp.add_argument("--from-runs", action="store_true", help="compare existing run directories, run nothing")
    cmp.add_argument("--out", default="runs", help="directory for run directories")
    cmp.add_argument("--runtime", default=None, help=RUNTIME_HELP + "; every scenario of the comparison")
    cmp.add_argument("-o", "--output", default="reports/generated/compare", help="where the report is written")
    cmp.add_argument("--golden-cache", default=None, metavar="DIR", help=GOLDEN_CACHE_HELP)
    cmp.add_argument("--sweep", default=None, metavar="KIND=V1,V2,...",
                     help="interconnect sweep, e.g. bandwidth=1gbit,100mbit,10mbit or delay=0ms,5ms,20ms: the one-node "
                     "scenario once "
                     "without faults, each multi-node scenario per value on netns with every node's link impaired "
                     "for the whole run; draws speedup against link quality and marks the crossover")
    c = sub.add_parser("cleanup", help="remove what runs whose engine died left behind (processes, containers, "
                       "networks, namespaces, delayers)")
    c.add_argument("--run-id", default=None, help="only this run's objects (live or not)")
    c.add_argument("--all", action="store_true", help="also the objects of runs whose engine is still alive")
    d = sub.add_parser("doctor", help="what this machine supports (docker, root, netem, NFQUEUE, tbf, image), "
                       "with the command that fixes each gap")
    d.add_argument("--json", action="store_true")
    im = sub.add_parser("image", help="build the node image for the docker runtime (offline with debootstrap), or "
                        "prune the images no run here would use any more")
    im.add_argument("action", choices=["build", "tag", "prune"])
    im.add_argument("--dry-run", action="store_true", help="prune: list what would be removed, remove nothing")
    im.add_argument("--method", choices=["auto", "debootstrap", "dockerfile"], default="auto",
                    help="auto: dockerfile when python:3.11-slim is already here, else debootstrap (offline)")
    im.add_argument("--force", action="store_true", help="rebuild even when the image for these inputs exists")
    cl = sub.add_parser("cluster", help="bring a Slurm cluster in containers up or down (for tests, CI, and "
                        "anyone without a cluster)")
    cl.add_argument("action", choices=["up", "down", "status", "build"],
                    help="up: build the image if needed, start it, wait until every node is idle; down: remove "
                    "everything it made; status: what is up; build: only the image")
    cl.add_argument("kind", nargs="?", default="slurm", choices=["slurm"], help="the kind of cluster (slurm)")
    cl.add_argument("--nodes", type=int, default=None, metavar="N", help="compute nodes (up; required)")
    cl.add_argument("--name", default=None, help="the cluster's name (default: the kind); several can be up at once")
    cl.add_argument("--timeout", type=float, default=None, metavar="S",
                    help="seconds to wait for every node to be idle (up; default 60)")
    cl.add_argument("--no-repo", action="store_true", help="do not bind-mount this repository read-only into the "
                    "containers (up)")
    cl.add_argument("--dry-run", action="store_true", help="print what `up` would run (docker lines, slurm.conf) "
                    "and do nothing")
    cl.add_argument("--json", action="store_true", help="machine-readable output (up, status, --dry-run)")
    return p


def _directory_problem(path: str) -> str | None:
    """Why ``path`` cannot hold new directories (it or a parent is a file, or it is not writable), or None: said
    before anything runs, instead of a traceback once the run directory is made."""
    def present(a: Path) -> bool:  # lstat: a dangling link is there too; any error but "no such file" is said
        try:
            a.lstat()
        except (FileNotFoundError, NotADirectoryError):  # the latter: a parent is a file, said when reached
            return False
        return True

    try:
        p = Path(path).absolute()
        existing = next((a for a in (p, *p.parents) if present(a)), None)
        if existing is None:
            return None
        if not existing.is_dir():
            return (f"{existing} is not a directory" if existing == p
                    else f"{existing} (a parent of it) is not a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            return f"{existing} is not writable by this user"
    except OSError as exc:  # a name too long, a parent this user may not enter
        return exc.strerror or str(exc)
    return None


def handler(command: str) -> Callable[[argparse.Namespace], int]:
    """``main`` of the chosen subcommand's module, ``chaos.commands.<command>`` (the name argparse accepted)."""
    # The one import of a handler: by name, when its subcommand is chosen (the lazy-subcommand pattern of git's
    # builtins and click's LazyGroup), so the parser and `chaos --help` load none of the commands' dependencies.
    return importlib.import_module(f"chaos.commands.{command}").main


def main(argv: list[str] | None = None) -> int:
    """Parse, refuse an unusable ``--out``/``--golden-cache`` up front, run the chosen handler, and turn the errors
    every command shares into their exit codes (2 invalid scenario, 130 interrupted, 0 on a closed pipe)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    for option, attr in (("--out", "out"), ("--golden-cache", "golden_cache")):
        value = getattr(args, attr, None)
        problem = _directory_problem(value) if value is not None else None
        if problem:
            error(f"{option} {value}: {problem}; name a directory to create or to write in")
            return EXIT_USAGE
    try:
        with _golden_cache(getattr(args, "golden_cache", None)):
            return int(handler(args.command)(args))
    except ScenarioInvalid as exc:
        scenario_errors(exc)
        return EXIT_USAGE
    except BrokenPipeError:  # `chaos ... | head`: the reader left early; nothing went wrong here
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at interpreter exit
        return EXIT_PASS
    except KeyboardInterrupt:  # explore / compare interrupted: every run was already torn down
        err.print("interrupted", highlight=False)
        return EXIT_INTERRUPTED


def entry() -> None:
    """The ``chaos`` and ``torch-chaos`` commands, and ``python -m chaos``: :func:`main`, then the exit.

    Before the interpreter's teardown every object made so far is frozen out of the cyclic garbage collector
    (``gc.freeze``): its last collections otherwise walk everything a run loaded (the scenario model's schemas, the
    analysis, rich), ~0.1 s of every command's end here (issue 36), to free memory the process is about to give
    back anyway. Objects are still released by reference count as modules are cleared, so files still close and
    ``atexit`` hooks still run. Not in :func:`main` itself: a process that calls it and goes on (the tests, an
    embedding program) keeps its collector."""
    claim_process()
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    entry()
