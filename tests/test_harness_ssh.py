"""The ssh backend end to end with paramiko, against containers that run sshd: run, upload,
download, signal; pinned host keys (a wrong one is refused); a schemasync cluster whose code the
backend uploads itself."""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path

import paramiko
import pytest

from contract.config_error import ConfigError
from contract.remote import RemoteError
from harness.backends import provision
from harness.cluster import ClusterSpec, ProvisionError
from harness.remote_docker import DockerNodes, _host_key, generate_run_key
from harness.remote_ssh import SshRemote, load_nodes_file
from targets.schemasync import SchemaSyncTarget
from tests.test_harness_support import node_image  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def sshd_hosts(node_image: str, tmp_path_factory: pytest.TempPathFactory):  # noqa: F811
    """Three containers running sshd, described by a nodes file with pinned host keys."""
    tmp_path = tmp_path_factory.mktemp("sshd")
    key = generate_run_key(tmp_path / "keys")
    nodes = DockerNodes(f"t-ssh-{int(time.time())}", ["s1", "s2", "s3"], node_image, key)
    try:
        nodes.up(timeout=60)
        known = []
        entries = []
        for name, remote in nodes.remotes.items():
            host_key = _host_key(nodes.containers[name], 10)
            known.append(f"{remote.host} {host_key.get_name()} {host_key.get_base64()}")
            entries.append(
                f'[[node]]\nname = "{name}"\nhost = "{remote.host}"\nport = 22\n'
                f'user = "root"\nkey = "{key.private_path}"\n'
                f'known_hosts = "{tmp_path}/known_hosts"\n'
            )
        (tmp_path / "known_hosts").write_text("\n".join(known) + "\n")
        nodes_file = tmp_path / "nodes.toml"
        nodes_file.write_text("\n".join(entries))
        yield nodes_file, nodes
    finally:
        nodes.down()


@pytest.mark.docker
def test_ssh_remote_run_upload_download_signal(sshd_hosts, tmp_path: Path) -> None:
    nodes_file, _ = sshd_hosts
    hosts = load_nodes_file(nodes_file)
    h = hosts[0]
    remote = SshRemote(
        h.name, h.host, port=h.port, user=h.user, key_file=h.key, known_hosts=h.known_hosts
    )
    try:
        result = remote.run("hostname; echo err >&2; exit 3", check=False)
        assert (result.exit_code, result.stdout.strip(), result.stderr.strip()) == (3, "s1", "err")
        with pytest.raises(RemoteError, match="exit 3"):
            remote.run("exit 3")
        with pytest.raises(RemoteError, match="timed out"):
            remote.run("sleep 5", timeout=0.5)

        payload = tmp_path / "payload.bin"
        payload.write_bytes(bytes(range(256)) * 64)
        remote.upload(payload, "/tmp/payload.bin")
        assert remote.run("sha256sum /tmp/payload.bin").stdout.split()[0] == (
            hashlib.sha256(payload.read_bytes()).hexdigest()
        )
        remote.download("/tmp/payload.bin", tmp_path / "back" / "payload.bin")
        assert (tmp_path / "back" / "payload.bin").read_bytes() == payload.read_bytes()

        remote.run("nohup setsid sleep 300 >/dev/null 2>&1 </dev/null &")
        remote.run("nohup setsid sleep 301 >/dev/null 2>&1 </dev/null &")
        remote.signal("sleep 300", "STOP")
        state = remote.run("ps -o stat=,args= -C sleep").stdout.splitlines()
        stat = {line.split()[-1]: line.split()[0][0] for line in state}
        assert (stat["300"], stat["301"]) == ("T", "S")
        remote.signal("sleep 300", "KILL")
        remote.signal("sleep 300", "KILL")  # nothing left to match is not an error
        assert remote.run("pgrep -f 'sleep 30[01]' | wc -l").stdout.strip() == "1"
    finally:
        remote.close()


def _sshd_sessions(container) -> set[str]:
    """Pids of the unprivileged sshd processes that serve one connection's channels each."""
    _, out = container.exec_run(["pgrep", "-f", "sshd: root@notty"])
    return set(out.decode().split())


@pytest.mark.docker
def test_a_hung_connection_is_replaced_and_the_command_runs_once(sshd_hosts) -> None:
    nodes_file, nodes = sshd_hosts
    h = load_nodes_file(nodes_file)[1]
    container = nodes.containers[h.name]
    remote = SshRemote(h.name, h.host, key_file=h.key, known_hosts=h.known_hosts, connect_timeout=3)
    before = _sshd_sessions(container)
    hung: set[str] = set()
    try:
        remote.run("rm -f /tmp/ran")
        hung = _sshd_sessions(container) - before
        assert len(hung) == 1
        container.exec_run(["kill", "-STOP", *hung])  # the server side of this connection hangs
        result = remote.run("echo x >> /tmp/ran; wc -l < /tmp/ran")
        assert result.stdout.strip() == "1"
        assert _sshd_sessions(container) - before - hung, "the command ran on a new connection"
    finally:
        if hung:
            container.exec_run(["kill", "-CONT", *hung])
        remote.close()


@pytest.mark.docker
def test_ssh_refuses_an_unknown_host_key(sshd_hosts) -> None:
    nodes_file, _ = sshd_hosts
    h = load_nodes_file(nodes_file)[0]
    assert h.key is not None
    wrong = paramiko.Ed25519Key.from_private_key_file(h.key)  # the user key is not the host key
    remote = SshRemote(h.name, h.host, key_file=h.key, host_keys=[wrong], connect_timeout=5)
    with pytest.raises(RemoteError, match="refused"):
        remote.run("true")
    remote.close()


@pytest.mark.docker
@pytest.mark.cluster
def test_ssh_backend_uploads_code_and_runs_a_cluster(sshd_hosts, tmp_path: Path) -> None:
    nodes_file, _ = sshd_hosts
    spec = ClusterSpec(backend="ssh", voters=3, nodes_file=nodes_file)
    with provision(spec, "t-ssh-cluster", tmp_path / ".tmp") as cluster:
        assert cluster.learners == []
        target = SchemaSyncTarget()
        try:
            target.setup(cluster, {"delay_duration_ms": 100, "max_clock_skew_ms": 50})
            out = cluster.remotes["s2"].run("ls /var/tmp/schemachaos/code/schemasync/node.py")
            assert out.exit_code == 0
            target.start_all()
            target.wait_ready(30)

            async def ddl() -> dict:
                client = await target.client("s3")
                try:
                    return await client.ddl({"stmt": "CREATE TABLE t (a INT32)"})
                finally:
                    await client.close()

            assert asyncio.run(ddl())["catalog_version"] == 2
        finally:
            target.teardown()


def test_nodes_file_errors_name_the_entry(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_nodes_file(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text('[[node]]\nname = "a"\nhost = "127.0.0.1"\nport = 70000\n')
    with pytest.raises(ConfigError, match=r"node\[0\]: port"):
        load_nodes_file(bad)
    bad.write_text('[[node]]\nname = "a"\n')
    with pytest.raises(ConfigError, match=r"node\[0\]: host is required"):
        load_nodes_file(bad)
    with (
        pytest.raises(ProvisionError, match="nodes-file"),
        provision(ClusterSpec(backend="ssh"), "t", tmp_path / ".tmp"),
    ):
        pass
