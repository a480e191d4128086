"""The shell commands the hosts' fault surface sends, checked for their text and then run for
real: the faketime file moves a process's clock under libfaketime, and the iptables and tc
commands cut and slow real TCP inside a throwaway network namespace (never the host's own
rules), each rule carrying its run so that one run's heal never takes another's rules."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.backends.host_clock import (
    stop_strobe_command,
    strobe_command,
    write_offset_command,
)
from harness.backends.host_net import (
    drop_command,
    remove_rules_command,
    shape_command,
    unshape_command,
)
from harness.cluster_spec import rule_is_runs
from harness.faketime import faketime_env, offset_literal
from tests.conftest import require

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def test_offset_literals_are_seconds_with_a_sign() -> None:
    assert offset_literal(0.25) == "+0.25"
    assert offset_literal(-0.4) == "-0.4"
    assert offset_literal(0) == "+0"
    assert offset_literal(1.5) == "+1.5"
    assert offset_literal(-0.001) == "-0.001"
    assert offset_literal(2) == "+2"
    assert "ms" not in offset_literal(0.25)  # libfaketime reads `250ms` as minutes


RUN = "t-run.1"
MARKS = "-m comment --comment schemachaos -m comment --comment schemachaos.run=t-run.1"


def test_rule_text_carries_our_comment_the_run_and_matches_loopback_locally() -> None:
    local = drop_command("127.0.0.11", ["127.0.0.12", "127.0.0.13"], None, "partition", RUN, True)
    assert local == (
        "iptables -w -A INPUT -i lo -d 127.0.0.11 -s 127.0.0.12,127.0.0.13 "
        f"{MARKS} -m comment --comment partition -j DROP"
    )
    docker = drop_command("10.0.0.2", ["10.0.0.3"], None, "partition", RUN, False)
    assert "-i lo" not in docker and "--comment schemachaos" in docker
    lag = drop_command("10.0.0.4", None, 10900, "lagging-learner", RUN, False)
    assert lag == (
        "iptables -w -A INPUT -p tcp -m multiport --ports 10900 "
        f"{MARKS} -m comment --comment lagging-learner -j DROP"
    )
    with pytest.raises(ValueError, match="not a run id"):
        drop_command("10.0.0.2", ["10.0.0.3"], None, "partition", "a b", False)
    # no source cuts nothing (a rule without -s would drop from everyone)
    assert drop_command("10.0.0.2", [], None, "partition", RUN, False) == "true"


def test_faketime_file_moves_a_process_clock_and_only_its_own(tmp_path: Path) -> None:
    require(Path(LIBFAKETIME).exists(), "libfaketime is not installed (Debian package faketime)")
    ft = tmp_path / "faketime"
    subprocess.run(["bash", "-c", write_offset_command(str(ft), 0)], check=True)
    assert ft.read_text() == "+0\n"
    script = (
        "import sys, time\nfor line in sys.stdin:\n    print(int(time.time() * 1000), flush=True)\n"
    )
    env = {**os.environ, **faketime_env(str(ft), LIBFAKETIME)}
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None

    def sample() -> tuple[float, float]:
        t0 = time.time()
        proc.stdin.write("\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        seen = int(proc.stdout.readline())  # type: ignore[union-attr]
        t1 = time.time()
        return t1 - t0, seen - (t0 + t1) * 500

    def offset_ms() -> float:
        """The sample with the shortest round trip of five (the machine is busy)."""
        return min(sample() for _ in range(5))[1]

    try:
        host_before = time.time() - time.monotonic()
        assert abs(offset_ms()) < 50
        for seconds in (0.25, -0.4, 1.5, 0):
            subprocess.run(["bash", "-c", write_offset_command(str(ft), seconds)], check=True)
            assert abs(offset_ms() - seconds * 1000) < 50, seconds
        # this process's clock never moved
        assert abs((time.time() - time.monotonic()) - host_before) < 0.05
    finally:
        proc.kill()
        proc.wait()


def test_strobe_loop_flips_the_file_on_its_own_and_stops(tmp_path: Path) -> None:
    ft = str(tmp_path / "faketime")
    subprocess.run(["bash", "-c", strobe_command(ft, 0.0, 0.3, 0.05, 10.0)], check=True, timeout=10)
    seen: set[str] = set()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        if os.path.exists(ft):
            seen.add(Path(ft).read_text())
        time.sleep(0.01)
    assert seen == {"+0.3\n", "+0\n"}
    pid = int(Path(ft + ".strobe.pid").read_text())
    stopped = subprocess.run(
        ["bash", "-c", stop_strobe_command(ft)], capture_output=True, text=True
    )
    flips = int(stopped.stdout.split()[-1])
    assert 6 <= flips <= 25, flips  # about one per 50 ms for a second
    time.sleep(0.1)
    assert (
        not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    )
    assert not Path(ft + ".strobe.pid").exists()
    # nothing to stop is not an error and prints nothing
    again = subprocess.run(["bash", "-c", stop_strobe_command(ft)], capture_output=True, text=True)
    assert again.returncode == 0 and again.stdout == ""


@pytest.fixture
def netns(needs_root: None) -> Iterator[str]:
    """A fresh network namespace with lo up: 127/8 is all ours, the host's rules untouched."""
    require(
        shutil.which("ip") is not None and shutil.which("iptables") is not None, "no ip/iptables"
    )
    name = f"scnem{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _in_ns(ns: str, cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", ns, "bash", "-c", cmd], capture_output=True, text=True, timeout=60
    )


PROBE = """
import socket, sys, time, threading
dst, port, srcs, nbytes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), int(sys.argv[4])
srv = socket.create_server((dst, port))
def serve():
    while True:
        c, _ = srv.accept()
        def drain(c=c):
            while c.recv(65536): pass
            c.close()
        threading.Thread(target=drain, daemon=True).start()
threading.Thread(target=serve, daemon=True).start()
for src in srcs:
    t0 = time.monotonic()
    try:
        s = socket.create_connection((dst, port), timeout=1.0, source_address=(src, 0))
        s.settimeout(20.0)
        s.sendall(b"x" * nbytes)
        s.shutdown(socket.SHUT_WR)
        s.recv(1)
        print(src, "ok", round(time.monotonic() - t0, 2))
    except OSError as e:
        print(src, "blocked", type(e).__name__)
"""


def _probe(ns: str, dst: str, port: int, sources: list[str], nbytes: int = 10) -> dict[str, str]:
    out = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            ns,
            sys.executable,
            "-c",
            PROBE,
            dst,
            str(port),
            ",".join(sources),
            str(nbytes),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return {line.split()[0]: " ".join(line.split()[1:]) for line in out.stdout.splitlines()}


@pytest.mark.root
def test_partition_rules_cut_exactly_one_direction_and_heal_removes_only_ours(netns: str) -> None:
    # a foreign rule that heal must leave alone
    assert _in_ns(netns, "iptables -w -A INPUT -s 127.0.0.99 -j DROP").returncode == 0
    cmd = drop_command("127.0.0.11", ["127.0.0.12"], None, "partition", RUN, True)
    assert _in_ns(netns, cmd).returncode == 0
    seen = _probe(netns, "127.0.0.11", 10900, ["127.0.0.12", "127.0.0.13"])
    assert seen["127.0.0.12"].startswith("blocked") and seen["127.0.0.13"].startswith("ok")
    # traffic between other nodes is untouched
    assert _probe(netns, "127.0.0.12", 10900, ["127.0.0.13"])["127.0.0.13"].startswith("ok")
    listed = _in_ns(netns, f"iptables -w -S INPUT | grep -F -- {RUN}").stdout
    assert "-d 127.0.0.11/32" in listed and "--comment partition" in listed
    # `clean --run-id` reads the rule as iptables prints it (the run comment quoted): this run's
    (rule,) = listed.splitlines()
    assert rule_is_runs(rule, RUN, None) and not rule_is_runs(rule, RUN + "0", None)
    healed = _in_ns(netns, remove_rules_command("partition", RUN, "127.0.0.11"))
    assert healed.stdout.strip() == "0"
    assert _probe(netns, "127.0.0.11", 10900, ["127.0.0.12"])["127.0.0.12"].startswith("ok")
    rules = _in_ns(netns, "iptables -w -S INPUT").stdout
    assert "schemachaos" not in rules and "-s 127.0.0.99/32" in rules


@pytest.mark.root
def test_a_runs_heal_leaves_another_runs_rules_on_a_shared_host(netns: str) -> None:
    """Two local runs share the host's iptables: run X's heal and sweep take none of run X0's
    rules (a prefix of an id names no other run), nor of another node's address."""
    other = RUN + "0"
    for run, dst in ((RUN, "127.0.0.11"), (other, "127.0.0.11"), (RUN, "127.0.0.21")):
        assert (
            _in_ns(
                netns, drop_command(dst, ["127.0.0.12"], None, "partition", run, True)
            ).returncode
            == 0
        )
    mine = _in_ns(netns, remove_rules_command("partition", RUN, "127.0.0.11"))
    assert mine.stdout.strip() == "0"
    left = _in_ns(netns, "iptables -w -S INPUT").stdout
    assert f'"schemachaos.run={other}"' in left and "-d 127.0.0.21/32" in left, left
    assert _in_ns(netns, remove_rules_command(None, RUN)).stdout.strip() == "0"
    left = _in_ns(netns, "iptables -w -S INPUT").stdout
    assert f'"schemachaos.run={RUN}"' not in left and f'"schemachaos.run={other}"' in left
    assert _probe(netns, "127.0.0.11", 10900, ["127.0.0.12"])["127.0.0.12"].startswith("blocked")


@pytest.mark.root
def test_lagging_drop_cuts_only_the_metastore_port(netns: str) -> None:
    cmd = drop_command("127.0.0.14", None, 10900, "lagging-learner", RUN, True)
    assert _in_ns(netns, cmd).returncode == 0
    assert _probe(netns, "127.0.0.14", 10900, ["127.0.0.11"])["127.0.0.11"].startswith("blocked")
    assert _probe(netns, "127.0.0.14", 10800, ["127.0.0.11"])["127.0.0.11"].startswith("ok")
    # the partition heal leaves lagging-learner rules alone; the full heal removes them
    assert _in_ns(netns, remove_rules_command("partition", RUN)).stdout.strip() == "1"
    assert _in_ns(netns, remove_rules_command(None, RUN)).stdout.strip() == "0"


@pytest.mark.root
def test_tbf_shape_slows_only_metastore_traffic_to_the_learner(netns: str) -> None:
    shape = _in_ns(netns, shape_command(["127.0.0.14"], 10900, 64, RUN))
    assert shape.returncode == 0, shape.stderr
    # twice is fine: the command replaces its own root
    assert _in_ns(netns, shape_command(["127.0.0.14"], 10900, 64, RUN)).returncode == 0
    slow = _probe(netns, "127.0.0.14", 10900, ["127.0.0.11"], nbytes=20_000)["127.0.0.11"]
    fast = _probe(netns, "127.0.0.14", 10800, ["127.0.0.11"], nbytes=20_000)["127.0.0.11"]
    assert slow.startswith("ok") and fast.startswith("ok"), (slow, fast)
    # 20 kB at 64 kbit/s takes ~2.5 s; unshaped it takes milliseconds
    assert float(slow.split()[1]) > 1.5 and float(fast.split()[1]) < 0.5, (slow, fast)
    # another run sharing the device owns no shaper there: its unslow and sweep leave ours
    assert _in_ns(netns, unshape_command(RUN + "0")).stdout.strip() == "0"
    assert "qdisc htb 5c5c: root" in _in_ns(netns, "tc qdisc show dev lo").stdout
    assert _in_ns(netns, unshape_command(RUN)).stdout.strip() == "0"
    assert "5c5c" not in _in_ns(netns, "tc qdisc show dev lo").stdout
