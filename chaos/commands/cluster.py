"""``chaos cluster up|down|status|build [slurm]``: a Slurm cluster in containers (chaos/cluster/slurm.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from chaos.cluster import slurm
from chaos.cluster.spec import REPO_ROOT_DEFAULT, check_name, check_nodes, engine_run_argv
from chaos.commands import err, error, out
from chaos.run_result import EXIT_FAIL, EXIT_PASS, EXIT_USAGE


def main(args: argparse.Namespace) -> int:
    """``chaos cluster up|down|status|build [slurm]``: a Slurm cluster in containers (chaos/cluster/slurm.py)."""

    def usage(message: str) -> int:
        error(message)
        return EXIT_USAGE

    name = args.name or args.kind
    problems = [p for p in (check_name(name), check_nodes(args.nodes) if args.nodes is not None else None) if p]
    if args.action != "up":
        given = [flag for flag, value in (("--nodes", args.nodes), ("--timeout", args.timeout),
                                          ("--no-repo", args.no_repo or None)) if value is not None]
        given += ["--dry-run"] if args.dry_run else []
        if given:
            problems.append(f"{', '.join(given)}: only `chaos cluster up` takes {'it' if len(given) == 1 else 'them'}")
    elif args.nodes is None:
        problems.append("chaos cluster up: --nodes N is required (the number of compute nodes)")
    if args.timeout is not None and not 0 < args.timeout <= 86400:  # NaN fails this too
        problems.append(f"--timeout {args.timeout:g}: expected seconds > 0 (at most a day)")
    if problems:
        return usage("; ".join(problems))

    repo = None if args.no_repo else REPO_ROOT_DEFAULT
    log = (lambda line: err.print(line, highlight=False)) if args.json else (lambda line: out.print(line,
                                                                                                   highlight=False))
    try:
        if args.action == "up" and args.dry_run:
            spec, conf, steps = slurm.dry_run(name, args.nodes, repo)
            if args.json:
                print(json.dumps({"image": slurm.slurm_image_tag(), "slurm_conf": conf,
                                  "steps": [s.__dict__ for s in steps]}, indent=2))
                return EXIT_PASS
            print(f"# image {slurm.slurm_image_tag()} (built first when missing: "
                  f"{' '.join(slurm.apt_download_command(Path('STATUS'), Path('DEBS')))}, then docker build "
                  "--network none FROM the node image)")
            for step in steps:
                print(f"# {step.what}\n{step.command}")
            print(f"# {spec.node_list} share this slurm.conf:\n{conf}", end="")
            return EXIT_PASS
        if args.action == "up":
            result = slurm.up(name, args.nodes, args.timeout or slurm.DEFAULT_TIMEOUT_S, repo, log)
            if args.json:
                print(json.dumps({"state": result.state, "image_s": round(result.image_s, 2),
                                  "image": result.image_method, "containers_s": round(result.containers_s, 2),
                                  "idle_s": round(result.idle_s, 2)}, indent=2))
            else:
                st = result.state
                out.print(f"cluster {name} up: controller {st['controller']['container']}, nodes "
                          f"{st['node_list']} (partition {st['partition']}), user {st['user']['name']}, shared "
                          f"{st['shared']['path']} = {st['shared']['host_path']}, host-loss agent "
                          f"{st['agent']['address']} (pid {st['agent']['pid']})\ntry: {' '.join(st['exec'])} "
                          f"srun -N{len(st['nodes'])} hostname", highlight=False)
                engine = st.get("engine") or {}
                repo_path = (st.get("repo") or {}).get("path")
                argv = engine_run_argv(st, f"{repo_path}/scenarios/slurm/node-crash.yaml")
                if argv is not None:
                    out.print(f"run a scenario on it (the engine on the login node, as {st['user']['name']}): "
                              f"{' '.join(argv)}", highlight=False)
                else:
                    out.print(f"chaos run in the controller: not set up ({engine.get('why', 'unknown')})",
                              highlight=False)
            return EXIT_PASS
        if args.action == "build":
            tag, method, seconds = slurm.build_slurm_image(log)
            out.print(f"image {tag} ({method}, {seconds:.1f}s)", highlight=False)
            return EXIT_PASS
        if args.action == "down":
            removed = slurm.down(name)
            for line in removed:
                log(f"removed {line}")
            out.print(f"cluster {name}: removed {len(removed)} object(s)" if removed else
                      f"no cluster named {name!r} is up: nothing to remove", highlight=False)
            return EXIT_FAIL if any("NOT removed" in line for line in removed) else EXIT_PASS
        info = slurm.status(name)
        if args.json:
            print(json.dumps(info, indent=2))
        elif info is None:
            out.print(f"no cluster named {name!r} is up (`chaos cluster up {args.kind} --nodes N`)", highlight=False)
        else:
            st = info["state"] or {}
            out.print(f"cluster {name}: {'up' if info['complete'] else 'INCOMPLETE (chaos cluster down, then up)'}"
                      f"; state file {info['state_file']}" + (f", created {st['created']}" if st else ""),
                      highlight=False)
            for container, what in sorted(info["containers"].items()):
                host = container.rsplit("-", 1)[-1]
                slurm_state = f", slurm: {info['slurm'][host]}" if host in info["slurm"] else ""
                out.print(f"  {container}: {what}{slurm_state}", highlight=False)
            out.print(f"  agent: {info['agent']}", highlight=False)
        return EXIT_PASS if info is not None and info["complete"] else EXIT_FAIL
    except ValueError as exc:
        return usage(str(exc))
    except slurm.ClusterError as exc:
        error(str(exc))
        return EXIT_FAIL
    except OSError as exc:  # the docker engine went away or refused mid-command (requests' errors are OSErrors)
        error(f"the docker engine failed: {exc}; is dockerd running (`docker "
              "info`)? `chaos cluster down` removes what was made")
        return EXIT_FAIL
    except Exception as exc:
        import docker.errors

        if not isinstance(exc, docker.errors.DockerException):
            raise
        error(f"the docker engine refused: {exc}; `chaos cluster down` "
              "removes what was made")
        return EXIT_FAIL
