"""chaos.launchers.ray_node's command lines and refusals, without starting Ray (the real runs are in
tests/integration/test_ray_launcher.py)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from chaos.launchers import ray_node
from chaos.launchers.ray_node import UnsafeTempDir, private_dir, write_run_id


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


def test_the_run_folder_is_private_and_a_planted_one_is_refused(tmp_path: Path) -> None:
    """The Ray folders' names under /tmp are guessable: a link or another user's folder there must not receive
    Ray's sockets and logs written by the engine's user."""
    mine = tmp_path / "tchaos-ray-aaaaaa"
    private_dir(mine)
    assert stat.S_IMODE(mine.stat().st_mode) == 0o700
    private_dir(mine)  # a replaced node finds its own folder from before
    write_run_id(mine, "r-1")
    assert (mine / "run_id").read_text() == "r-1"
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "tchaos-ray-bbbbbb"
    link.symlink_to(target)
    with pytest.raises(UnsafeTempDir, match="is a link"):
        private_dir(link)
    shared = tmp_path / "tchaos-ray-cccccc"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(UnsafeTempDir, match="writable by others"):
        private_dir(shared)
    (mine / "run_id").unlink()
    (mine / "run_id").symlink_to(target / "planted")
    with pytest.raises(OSError):
        write_run_id(mine, "r-2")
    assert not (target / "planted").exists()
