"""chaos.launchers.ray_node's command lines and refusals, without starting Ray (the real runs are in
tests/integration/test_ray_launcher.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.launchers import ray_node


def test_head_command_keeps_ray_on_the_given_address_and_temp_dir() -> None:
    args, driver = ray_node.parse_args(["head", "--node-ip-address", "127.0.0.1", "--port", "6380", "--temp-dir",
                                        "/tmp/tchaos-ray-abc123/node0", "--expect-workers", "2", "--",
                                        "python", "train.py", "--steps", "5"])
    argv = ray_node.start_argv("head", args)
    assert driver == ["python", "train.py", "--steps", "5"]
    assert argv[1:3] == ["start", "--block"]
    assert {"--head", "--port=6380", "--num-cpus=0", "--node-ip-address=127.0.0.1",
            "--temp-dir=/tmp/tchaos-ray-abc123/node0", "--include-dashboard=false",
            "--disable-usage-stats"} <= set(argv)
    assert f"--object-store-memory={ray_node.OBJECT_STORE_BYTES}" in argv


def test_worker_command_has_no_head_only_flags() -> None:
    # measured: `ray start --address ... --include-dashboard=false` refuses to start (a head-only flag)
    args, driver = ray_node.parse_args(["worker", "--node-ip-address", "10.0.0.2", "--address", "10.0.0.1:6380",
                                        "--num-cpus", "2", "--temp-dir", "/tmp/tchaos-ray-abc123/node1"])
    argv = ray_node.start_argv("worker", args)
    assert driver == []
    assert "--address=10.0.0.1:6380" in argv and "--num-cpus=2" in argv
    assert not any(a.startswith(("--include-dashboard", "--head", "--port", "--disable-usage-stats")) for a in argv)


@pytest.mark.parametrize("argv, expected", [
    (["head", "--node-ip-address", "127.0.0.1", "--port", "1", "--temp-dir", "/tmp/x", "--expect-workers", "1"],
     "the driver command goes after `--`"),
    (["worker", "--node-ip-address", "a", "--address", "b:1", "--temp-dir", "/tmp/x", "--", "python"],
     "takes no driver command"),
    (["worker", "--node-ip-address", "a", "--address", "b:1", "--temp-dir", "relative/dir"], "must be absolute"),
    (["worker", "--node-ip-address", "a", "--address", "b:1", "--temp-dir", "/tmp/" + "x" * 60],
     "socket paths under it must fit in 107 bytes"),
])
def test_bad_command_lines_are_refused_with_the_reason(argv: list[str], expected: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        ray_node.parse_args(argv)
    assert exc.value.code == 2
    assert expected in capsys.readouterr().err


def test_the_last_node_to_stop_removes_the_runs_temp_folder(tmp_path: Path) -> None:
    root = tmp_path / "tchaos-ray-abc123"
    for node in ("node0", "node1"):
        (root / node / "session_x" / "sockets").mkdir(parents=True)
    (root / ray_node.RUN_ID_FILE).write_text("20261206-000000-x-abc123")
    ray_node.remove_temp_dir(str(root / "node1"))
    assert sorted(p.name for p in root.iterdir()) == ["node0", ray_node.RUN_ID_FILE]  # node0 still runs
    ray_node.remove_temp_dir(str(root / "node0"))
    assert not root.exists()
