"""Fast checks of the harness's pure parts and its bad-input handling (no cluster needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checker.contract import read_run_json
from contract.target import SettingsChecker
from harness.backends import resolve_backend
from harness.cli import main
from harness.cluster import Cluster, ProvisionError, remove_iptables_rules
from harness.images import apt_mirror, base_tag, node_tag
from harness.options import RunOptions, options_from_run_json
from harness.remote import normalize_signal, pgrep_command, pkill_command
from harness.remote_local import LocalRemote, check_ports_free, local_address, tagged_processes
from harness.remote_ssh import load_nodes_file
from harness.resolved_run import resolve_run
from harness.run import run_json
from harness.store import new_run_dir
from harness.target_settings import own_settings
from nemesis import schedule_to_json
from schemasync.config import parse_config
from targets.registry import load_target
from targets.schemasync import render_config

REPO = Path(__file__).resolve().parent.parent


def test_apt_mirror_reads_deb822_and_one_line_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\n"
        "Components: main\n"
    )
    assert apt_mirror(tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list").write_text(
        "deb [arch=amd64] http://other.example/debian bookworm main\n"
    )
    assert apt_mirror(tmp_path) == "http://other.example/debian"
    assert apt_mirror(tmp_path / "nothing") == "http://deb.debian.org/debian"


def test_image_tags_are_content_hashes() -> None:
    assert base_tag() == base_tag()
    assert base_tag().startswith("schemachaos-base:")
    assert node_tag("schemachaos-base:a") != node_tag("schemachaos-base:b")


def test_rendered_config_is_what_the_node_accepts() -> None:
    class R:
        def __init__(self, name: str, host: str) -> None:
            self.name, self.host = name, host

    nodes = ["n1", "n2", "n3", "n4"]
    cluster = Cluster(
        nodes=nodes,
        voters=nodes[:3],
        learners=nodes[3:],
        remotes={n: R(n, f"10.9.0.{i}") for i, n in enumerate(nodes, 1)},  # type: ignore[misc]
        backend="docker",
        node_dirs={n: "/var/lib/schemasync" for n in nodes},
    )
    toml = render_config(
        cluster, "n4", {"delay_duration_ms": 300, "toggles": ["no-ack-wait"], "base_ts": "begin"}
    )
    import tomllib

    cfg = parse_config(tomllib.loads(toml))
    assert cfg.name == "n4" and not cfg.is_voter
    assert cfg.voters == ("n1", "n2", "n3")
    assert cfg.delay_duration_ms == 300 and cfg.base_ts == "begin"
    assert cfg.toggles == frozenset({"no-ack-wait"})
    assert cfg.nodes["n2"].host == "10.9.0.2" and cfg.nodes["n2"].client_port == 10800
    assert str(cfg.log_file) == "/var/lib/schemasync/node.log"


def test_signal_commands_never_match_their_own_shell(tmp_path: Path) -> None:
    remote = LocalRemote("n1", "127.0.0.11", "t-unit")
    marker = f"schemachaos-unit-sleeper-{os.getpid()}"
    script = tmp_path / marker
    script.write_text("sleep 60\n")
    remote.run(f"nohup setsid bash {script} >/dev/null 2>&1 </dev/null &")
    try:
        assert remote.run(pgrep_command(marker), check=False).exit_code == 0
        # Through a shell, as on ssh: the shell's own argv holds only base64.
        result = remote.run(pkill_command(marker, "SIGKILL"))
        assert result.exit_code == 0
        deadline = time.monotonic() + 5
        while remote.run(pgrep_command(marker), check=False).exit_code == 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert remote.run(pkill_command(marker, "KILL")).exit_code == 0  # no match is fine
    finally:
        remote.signal(marker, "KILL")
    assert normalize_signal("sigstop") == "STOP"
    with pytest.raises(ValueError):
        normalize_signal("SIGSEGV")


def test_local_addresses_and_busy_ports() -> None:
    assert local_address(1) == "127.0.0.11"
    assert local_address(5, "127.0.3.10") == "127.0.3.15"
    with pytest.raises(ValueError):
        local_address(1, "10.0.0.1")
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.66.11", 10900))
        s.listen()
        with pytest.raises(Exception, match=r"port in use: 127\.0\.66\.11:10900"):
            check_ports_free(["127.0.66.11"])
    check_ports_free(["127.0.66.11"])  # free again once closed (TIME_WAIT does not count)


def test_store_layout_and_latest_links(tmp_path: Path) -> None:
    a = new_run_dir(tmp_path, "my test/1")
    b = new_run_dir(tmp_path, "my test/1")
    assert a.path != b.path and a.path.parent == b.path.parent
    assert a.path.parent.name == "my-test-1"
    assert (tmp_path / "latest").resolve() == b.path
    assert (tmp_path / "my-test-1" / "latest").resolve() == b.path
    assert a.run_id != b.run_id


def test_run_json_round_trips_into_repro_options(tmp_path: Path) -> None:
    opts = RunOptions(
        backend="local",
        nodes=4,
        voters=3,
        time_limit_s=12,
        concurrency=2,
        nemesis=("partition",),
        nemesis_interval_s=3,
        workload="index",
        seed=42,
        store=tmp_path,
        target_config={
            "toggles": ["no-ack-wait"],
            "delay_ms": 300,
            "max_skew_ms": 200,
        },
        test_name="rt",
    )
    run = new_run_dir(tmp_path, "rt")
    resolved = resolve_run(opts)
    data = run_json(resolved, run, 1234)
    assert (data["nodes"], data["voters"], data["learners"]) == (
        ["n1", "n2", "n3", "n4"],
        ["n1", "n2", "n3"],
        ["n4"],
    )
    assert data["nemesis"]["schedule"] == schedule_to_json(list(resolved.schedule))
    assert data["nemesis"]["schedule"], "a partition every 3 s of 12"
    for key in (
        "test",
        "seed",
        "backend",
        "target",
        "clock",
        "nodes",
        "voters",
        "learners",
        "config",
        "nemesis",
        "workload",
        "start_wall_ms",
        "harness_version",
    ):
        assert key in data
    run.run_json.write_text(json.dumps(data))
    again = options_from_run_json(run.run_json)
    assert again.store == tmp_path
    for field in (
        "backend",
        "nodes",
        "voters",
        "time_limit_s",
        "concurrency",
        "nemesis",
        "nemesis_interval_s",
        "workload",
        "seed",
    ):
        assert getattr(again, field) == getattr(opts, field), field
    # run.json holds the settings the nodes ran with, under the nodes' own names
    assert again.target_config["toggles"] == ["no-ack-wait"]
    assert again.target_config["delay_duration_ms"] == 300
    assert again.target_config["max_clock_skew_ms"] == 200
    assert again.target_config["idle_safe_time_interval_ms"] == 250
    assert again.target_config["partitions"] == 4  # a default, recorded


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["run", "--nodes", "0"], "--nodes"),
        (["run", "--backend", "kubernetes"], "--backend"),
        (["run", "--toggle", "no-such-toggle"], "--toggle"),
        (["run", "--voters", "6"], "--voters"),
        (["run", "--backend", "ssh", "--nodes-file", "/nonexistent/nodes.toml"], "nodes file"),
        (["run", "--scenario", "/nonexistent/s.toml"], "--scenario"),
        (["run", "--workload", "no-such-workload", "--backend", "local"], "--workload"),
        (["run", "--target", "oracle"], "--target"),
        (["run", "--nemesis", "meteor"], "--nemesis"),
        (["clean", "--nodes-file", "/nonexistent/nodes.toml"], "--nodes-file"),
        (["analyze", "/nonexistent/run"], "RUN_DIR"),
        (["repro", "/nonexistent/run"], "RUN_DIR"),
        (["nightly", "--matrix", "/nonexistent/m.toml"], "--matrix"),
    ],
)
def test_bad_input_is_one_line_and_exit_254(argv: list[str], names: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        sys.exit(main(argv))
    assert exit_info.value.code == 254
    err = capsys.readouterr().err.strip().splitlines()
    err = [line for line in err if not line.startswith("schemachaos: backend")]
    assert len(err) == 1, err
    assert names in err[0]


def test_a_nodes_file_key_typo_is_bad_input_naming_the_key(tmp_path: Path, capsys) -> None:
    nodes = tmp_path / "nodes.toml"
    nodes.write_text('[[node]]\nname = "n1"\nhost = "10.0.0.1"\nprot = 22\n')
    argv = ["run", "--backend", "ssh", "--nodes-file", str(nodes), "--store", str(tmp_path)]
    assert main(argv) == 254
    err = capsys.readouterr().err
    assert f"{nodes}: node[0]: prot: unknown key (allowed: name, host, port, user, key" in err
    nodes.write_text('[[node]]\nname = "n1"\nhost = "10.0.0.1"\nport = 22\n')
    assert [h.port for h in load_nodes_file(nodes)] == [22]  # the fixed file is accepted


def test_every_command_has_help() -> None:
    for argv in (
        ["--help"],
        ["run", "--help"],
        ["analyze", "--help"],
        ["report", "--help"],
        ["repro", "--help"],
        ["serve", "--help"],
        ["images", "build", "--help"],
        ["clean", "--help"],
        ["nightly", "--help"],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "harness.cli", *argv],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0 and "usage: schemachaos" in proc.stdout, argv


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ProvisionError, match="--backend"):
        resolve_backend("vm")


@pytest.mark.root
def test_remove_iptables_rules_takes_only_ours(needs_root: None) -> None:
    ours = "-s 127.0.7.11/32 -d 127.0.7.12/32 -m comment --comment schemachaos -j DROP"
    theirs = "-s 127.0.7.11/32 -d 127.0.7.13/32 -m comment --comment someone-else -j DROP"
    subprocess.run(f"iptables -w -A OUTPUT {ours}", shell=True, check=True)
    subprocess.run(f"iptables -w -A OUTPUT {theirs}", shell=True, check=True)
    try:
        removed = remove_iptables_rules(["127.0.7.12"])
        assert len(removed) == 1 and "127.0.7.12" in removed[0]
        rules = subprocess.run(["iptables", "-w", "-S", "OUTPUT"], capture_output=True, text=True)
        assert "127.0.7.12" not in rules.stdout and "127.0.7.13" in rules.stdout
    finally:
        subprocess.run(f"iptables -w -D OUTPUT {ours}", shell=True, capture_output=True)
        subprocess.run(f"iptables -w -D OUTPUT {theirs}", shell=True, capture_output=True)
    assert tagged_processes("t-unit-no-such-run") == []


@pytest.mark.root
def test_rootfs_removal_unmounts_first_and_spares_what_is_mounted(
    needs_root: None, tmp_path: Path
) -> None:
    from harness.images import remove_rootfs

    root = tmp_path / "build"
    (root / "rootfs" / "dev").mkdir(parents=True)
    outside = tmp_path / "host-dev"
    outside.mkdir()
    (outside / "null").write_text("a host file a failed debootstrap bind-mounted")
    subprocess.run(["mount", "--bind", str(outside), str(root / "rootfs" / "dev")], check=True)
    try:
        remove_rootfs(root)
    finally:
        subprocess.run(["umount", "-l", str(root / "rootfs" / "dev")], capture_output=True)
    assert not root.exists()
    assert (outside / "null").exists(), "removal walked into a bind mount"


@pytest.mark.parametrize("target", ["schemasync", "postgres", "galera"])
def test_run_json_has_the_contract_config_keys_and_repro_gives_the_target_its_own(
    tmp_path: Path, target: str
) -> None:
    """history.md: run.json's config has DD, CSmax, idle SyncTime and toggles for every target;
    a target without them records 0 and [], and `repro` hands back only what it takes."""
    opts = RunOptions(backend="docker", store=tmp_path, target=target, nodes=3, voters=3)
    run = new_run_dir(tmp_path, "contract")
    data = run_json(resolve_run(opts), run, 0)
    config = data["config"]
    assert {"delay_duration_ms", "max_clock_skew_ms", "idle_safe_time_interval_ms"} <= set(config)
    assert config["toggles"] == []
    if target == "schemasync":
        assert (config["delay_duration_ms"], config["max_clock_skew_ms"]) == (500, 500)
    else:
        assert (config["delay_duration_ms"], config["max_clock_skew_ms"]) == (0, 0)
    run.run_json.write_text(json.dumps(data))
    read_run_json(run.path)  # the checker's contract validation takes it
    checker = load_target(target)
    again = own_settings(checker, options_from_run_json(run.run_json).target_config)
    assert isinstance(checker, SettingsChecker)
    checker.check_settings(again)
    assert ("toggles" in again) == (target == "schemasync")
    # repro resolves a stored run's options the same way: the target keeps its own settings
    stored = resolve_run(options_from_run_json(run.run_json), stored=True)
    assert stored.opts.target_config == again
