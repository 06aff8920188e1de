"""`chaos cluster up slurm` for real: a controller and 3 compute containers reach `sinfo` idle, `srun` as the
unprivileged user reaches every node, `docker kill` of a compute container is marked down by Slurm itself (the time
is printed) and `docker start` brings it back to idle, and `down` leaves no container, network, volume or state
file. Then a cluster whose state file is gone is an orphan that `chaos cleanup` removes, while a live one survives
it.

Needs a Docker engine and the node image (`chaos image build`); the Slurm image is built from them (seconds,
cached). Under CI=true a missing piece fails the test; elsewhere it is skipped with the command that fixes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.cli import main
from chaos.cluster import slurm
from chaos.cluster.spec import AGENT_FILE, STATE_DIR_ENV, state_path
from tests.tiers import FULL

# The whole file waits for --full: the gate's Slurm run is test_slurm_runtime.py's node crash.
pytestmark = [pytest.mark.integration, FULL]

NODES = 3


@pytest.fixture
def engine() -> object:
    from chaos.image import image_tag

    try:
        client = slurm._docker()
        problem = None if client.api.images(name=image_tag()) else f"the node image {image_tag()} is not built: " \
                                                                   "chaos image build"
    except slurm.ClusterError as exc:
        client, problem = None, str(exc)
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    return client


def leftovers(client: object, name: str) -> list[str]:
    found = slurm.find(client, name)
    return ([c["Names"][0] for c in found.containers] + [n["Name"] for n in found.networks]
            + [v["Name"] for v in found.volumes])


def test_up_srun_node_loss_down(engine: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    name = f"it{os.getpid()}"
    client = engine
    try:
        result = slurm.up(name, NODES, timeout_s=60, log=lambda line: None)
        st = result.state
        nodes = [n["name"] for n in st["nodes"]]
        assert nodes == ["c1", "c2", "c3"]
        assert json.loads(state_path(name).read_text()) == st
        with pytest.raises(slurm.ClusterError, match="already up"):
            slurm.up(name, NODES, log=lambda line: None)

        assert slurm.node_states(client, st["controller"]["container"]) == dict.fromkeys(nodes, "idle")
        start = time.monotonic()
        code, output = slurm.exec_in(client, st["controller"]["container"], ["srun", f"-N{NODES}", "hostname"],
                                     user=st["user"]["name"])
        srun_s = time.monotonic() - start
        assert code == 0, output
        assert sorted(output.split()) == nodes
        code, whoami = slurm.exec_in(client, st["controller"]["container"], ["srun", "-N1", "-w", "c2", "id", "-un"],
                                     user=st["user"]["name"])
        assert (code, whoami.strip()) == (0, "chaos")

        assert main(["cluster", "status", "--name", name]) == 0
        # the agent's address and token: in the login node, for the cluster's user only
        code, mode = slurm.exec_in(client, st["controller"]["container"], ["stat", "-c", "%a %U", AGENT_FILE])
        assert (code, mode.strip()) == (0, "400 chaos") and st["agent"]["address"].startswith(
            st["network"]["subnet"].rsplit(".", 1)[0] + ".1:")
        removed = slurm.cleanup(None, only_orphans=True)  # claimed by its state file: `chaos cleanup` keeps it
        assert not any(name in line for line in removed), removed
        assert len(leftovers(client, name)) == NODES + 3  # the containers, the network, the volume

        lost = st["nodes"][1]
        start = time.monotonic()
        client.api.kill(lost["container"])
        states: dict[str, str] = {}
        while time.monotonic() - start < 60:
            states = slurm.node_states(client, st["controller"]["container"])
            if states.get(lost["name"], "").startswith("down"):
                break
            time.sleep(0.2)
        detect_s = time.monotonic() - start
        assert states.get(lost["name"], "").startswith("down"), states
        assert states["c1"] == states["c3"] == "idle"

        start = time.monotonic()  # the node comes back (ReturnToService=2): its container keeps conf and key
        client.api.start(lost["container"])
        while time.monotonic() - start < 30 and states.get(lost["name"]) != "idle":
            time.sleep(0.2)
            states = slurm.node_states(client, st["controller"]["container"])
        back_s = time.monotonic() - start
        assert states == dict.fromkeys(nodes, "idle"), states
        code, output = slurm.exec_in(client, st["controller"]["container"], ["srun", f"-N{NODES}", "hostname"],
                                     user=st["user"]["name"])
        assert (code, sorted(output.split())) == (0, nodes), output
        with capsys.disabled():
            print(f"\nslurm cluster: {NODES} nodes idle {result.idle_s:.1f} s after their containers were created "
                  f"(image {result.image_method} {result.image_s:.1f} s); srun -N{NODES} hostname {srun_s:.2f} s; "
                  f"docker kill {lost['name']} -> Slurm marked it down* after {detect_s:.1f} s; docker start -> "
                  f"idle after {back_s:.1f} s")
    finally:
        start = time.monotonic()
        assert main(["cluster", "down", "--name", name]) == 0
        down_s = time.monotonic() - start
    assert leftovers(client, name) == []
    assert not state_path(name).exists()
    assert not [c for _, c, _ in slurm.running_agents() if c == name]  # down stopped the cluster agent
    assert not list((tmp_path / "state" / "clusters").glob(f"{name}.agent.*"))
    assert main(["cluster", "down", "--name", name]) == 0  # idempotent: nothing to remove
    with capsys.disabled():
        print(f"slurm cluster: down in {down_s:.1f} s")


def test_a_cluster_without_its_state_file_is_an_orphan_for_chaos_cleanup(engine: object, tmp_path: Path) -> None:
    name = f"orphan{os.getpid()}"
    state_dir = tmp_path / "state"
    env = {**os.environ, STATE_DIR_ENV: str(state_dir)}
    up = subprocess.run([sys.executable, "-m", "chaos", "cluster", "up", "slurm", "--nodes", "1", "--name", name,
                         "--no-repo"], capture_output=True, text=True, env=env, timeout=120)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert leftovers(engine, name)
        assert [c for _, c, _ in slurm.running_agents() if c == name] == [name]  # the agent outlives `up`
        kept = subprocess.run([sys.executable, "-m", "chaos", "cleanup"], capture_output=True, text=True, env=env,
                              timeout=120)
        assert name not in kept.stdout and leftovers(engine, name)  # its `up` is gone, but its state file claims it
        (state_dir / "clusters" / f"{name}.json").unlink()
        cleaned = subprocess.run([sys.executable, "-m", "chaos", "cleanup"], capture_output=True, text=True,
                                 env=env, timeout=120)
        assert f"volume tchaos-{name}-shared" in cleaned.stdout, cleaned.stdout
        assert "cluster agent" in cleaned.stdout and f"({name})" in cleaned.stdout, cleaned.stdout
        assert leftovers(engine, name) == []
        assert not [c for _, c, _ in slurm.running_agents() if c == name]
        assert not (state_dir / "clusters" / f"{name}.agent.json").exists()
    finally:
        slurm.stop_agents(name)
        slurm.remove(engine, slurm.find(engine, name))
