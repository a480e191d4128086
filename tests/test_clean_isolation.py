"""Concurrent runs are isolated (issue 50, item 4): `schemachaos clean --run-id X` takes exactly
run X's things (containers, network, reaper or watchdog, tagged processes, host iptables rules,
temp area) and nothing of run X1 or any other run; an empty or malformed id is refused instead
of meaning "every run"; two docker runs at once both complete and are both judged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import harness.cluster_spec as cluster_spec
from contract.exit_codes import EXIT_BAD_INPUT
from harness.cli_parser import build_parser
from tests.test_harness_ssh import sshd_hosts  # noqa: F401  (fixture)
from tests.test_harness_support import node_image  # noqa: F401  (fixture)

REPO = Path(__file__).resolve().parent.parent
BAD_IDS = ["", " ", "*", "a b", "../x", ".hidden", "x" * 129, "x\n", "x;rm"]


@pytest.mark.parametrize("run_id", BAD_IDS)
def test_clean_refuses_an_empty_or_malformed_run_id(
    run_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused by the parser, before clean() can build a filter from it ("" was "all")."""
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["clean", f"--run-id={run_id}"])
    assert exit_info.value.code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--run-id" in err, err


def test_clean_without_run_id_says_it_means_every_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["clean", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "without --run-id everything of ours, of every run" in help_text


@pytest.mark.parametrize("run_id", ["", "a b", "*"])
def test_the_filters_refuse_an_empty_id_instead_of_widening(run_id: str) -> None:
    """Each filter of a run's things: none reads an empty id as "all" (old remove_run and
    remove_guards did: `if run_id` turned "" into every run's label)."""
    from harness import remote_docker, remote_local
    from harness.cluster import clean
    from harness.reaper import remove_guards

    with pytest.raises(ValueError):
        remote_docker.run_filter(run_id)
    with pytest.raises(ValueError):
        remove_guards(run_id)
    with pytest.raises(ValueError):
        clean(run_id)
    if not run_id:
        with pytest.raises(ValueError):
            remote_local.kill_tagged(run_id)


def test_docker_filters_match_one_run_exactly() -> None:
    assert cluster_spec.check_run_id("20261207t042440-ab12cd") == "20261207t042440-ab12cd"
    from harness.remote_docker import run_filter

    assert run_filter("x") == "schemachaos.run=x"  # Docker's key=value filter is exact
    assert run_filter(None) == "schemachaos"


MARK = "-m comment --comment schemachaos"


def _run_mark(run_id: str) -> str:
    return f"-m comment --comment {cluster_spec.run_comment(run_id)}"


@pytest.mark.parametrize(
    ("rule", "run_id", "addresses", "expected"),
    [
        # a rule marked with its run belongs to that run only, whatever it names
        (f"-A INPUT -d 127.0.9.11/32 {MARK} {{x}} -j DROP", "x", None, True),
        (f"-A INPUT -d 127.0.9.11/32 {MARK} {{x1}} -j DROP", "x", ["127.0.9.11"], False),
        (f"-A INPUT -d 127.0.9.11/32 {MARK} {{x}} -j DROP", "x1", ["127.0.9.11"], False),
        # an unmarked rule of ours belongs to the run whose node addresses it names, exactly
        (f"-A INPUT -i lo -s 127.0.9.12/32 {MARK} -j DROP", "x", ["127.0.9.12"], True),
        (f"-A INPUT -d 127.0.9.111/32 {MARK} -j DROP", "x", ["127.0.9.11"], False),
        (f"-A INPUT -d 127.0.9.11/32 {MARK} -j DROP", "x", None, False),
        (f"-A INPUT -d 127.0.9.11/32 {MARK} -j DROP", "x", [], False),
        # not ours, whatever it names; every rule of ours only for a full clean
        ("-A INPUT -d 127.0.9.11/32 -m comment --comment schemachaosx -j DROP", None, None, False),
        ("-A INPUT -d 127.0.9.11/32 -j DROP", "x", ["127.0.9.11"], False),
        (f"-A INPUT -d 127.0.9.11/32 {MARK} -j DROP", None, None, True),
        (f"-A INPUT -d 127.0.9.11/32 {MARK} {{x}} -j DROP", None, None, True),
    ],
)  # fmt: skip
def test_a_host_rule_is_attributed_to_one_run(
    rule: str, run_id: str | None, addresses: list[str] | None, expected: bool
) -> None:
    rule = rule.replace("{x1}", _run_mark("x1")).replace("{x}", _run_mark("x"))
    assert cluster_spec.rule_is_runs(rule, run_id, addresses) is expected


# -- clean --run-id on this host: rules, processes, watchdogs, temp areas -------------------


def _record_local_run(store: Path, test: str, run_id: str, base: str, nodes: int) -> Path:
    """A run directory as a local run leaves it: run.json (its addresses) and its temp area."""
    run_dir = store / test / "20261207T000000"
    (run_dir / ".tmp").mkdir(parents=True)
    (run_dir / ".tmp" / "RUN_ID").write_text(run_id + "\n")
    run = {
        "run_id": run_id,
        "backend": "local",
        "nodes": [f"n{i}" for i in range(1, nodes + 1)],
        "options": {"local_base": base},
    }
    (run_dir / "run.json").write_text(json.dumps(run))
    return run_dir


def _chain_rules(chain: str) -> str:
    return subprocess.run(
        ["iptables", "-w", "-S", chain], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def scratch_chain() -> Iterator[str]:
    """A chain of our own that nothing jumps to: its rules are listed like any, drop nothing."""
    chain = f"SC-CLEAN-{os.getpid()}"
    subprocess.run(["iptables", "-w", "-N", chain], check=True)
    try:
        yield chain
    finally:
        subprocess.run(["iptables", "-w", "-F", chain], capture_output=True)
        subprocess.run(["iptables", "-w", "-X", chain], capture_output=True)


def _tagged_sleep(run_id: str) -> subprocess.Popen[bytes]:
    from harness.remote_local import RUN_ENV

    return subprocess.Popen(["sleep", "120"], env={**os.environ, RUN_ENV: run_id})


@pytest.mark.root
def test_clean_of_one_run_leaves_every_other_run_on_this_host(
    needs_root: None, scratch_chain: str, tmp_path: Path
) -> None:
    """Runs X (local, recorded), Y (local, other addresses) and X1 (an id X is a prefix of)
    each have host rules, a node process and a temp area; X1 also a watchdog. clean of X
    takes X's only (the old clean deleted every run's rules)."""
    from harness.cluster import clean
    from harness.reaper import LocalWatchdog, watchdog_processes

    tag = f"t{os.getpid()}"
    x, x1, y = f"{tag}-x", f"{tag}-x1", f"{tag}-y"
    store = tmp_path / "store"
    x_dir = _record_local_run(store, "x", x, "127.0.9.10", 2)
    x1_dir = _record_local_run(store, "x1", x1, "127.0.9.30", 2)
    y_dir = _record_local_run(store, "y", y, "127.0.9.20", 2)
    # each rule's destination is its own, so the listing after shows which went
    rules = {
        "127.0.9.11": f"-s 127.0.9.12/32 -d 127.0.9.11/32 {MARK} -j DROP",  # x's, unmarked
        "127.0.9.99": f"-d 127.0.9.99/32 {MARK} {_run_mark(x)} -j DROP",  # x's, marked
        "127.0.9.98": f"-s 127.0.9.11/32 -d 127.0.9.98/32 {MARK} {_run_mark(x1)} -j DROP",
        "127.0.9.21": f"-s 127.0.9.22/32 -d 127.0.9.21/32 {MARK} -j DROP",  # y's
        "127.0.9.31": f"-d 127.0.9.31/32 {MARK} -j DROP",  # x1's, unmarked
        "127.0.9.97": "-s 127.0.9.11/32 -d 127.0.9.97/32 -m comment --comment other -j DROP",
    }
    for rule in rules.values():
        subprocess.run(f"iptables -w -A {scratch_chain} {rule}", shell=True, check=True)
    procs = {r: _tagged_sleep(r) for r in (x, x1, y)}
    watchdog = LocalWatchdog.start(x1, [], tmp_path / "watchdog.log")
    try:
        removed = clean(run_id=x, store=store)
        left = _chain_rules(scratch_chain)
        gone = {d for d in rules if f"-d {d}/32 " not in left}
        assert gone == {"127.0.9.11", "127.0.9.99"}, (removed, left)
        assert procs[x].wait(timeout=10) == -signal.SIGKILL
        assert procs[x1].poll() is None and procs[y].poll() is None
        assert watchdog_processes(x1) != []
        assert not (x_dir / ".tmp").exists()
        assert (x1_dir / ".tmp").is_dir() and (y_dir / ".tmp").is_dir()
    finally:
        watchdog.close()
        for proc in procs.values():
            proc.kill()
            proc.wait()


# -- ssh hosts: a host another run holds is left alone -------------------------------------


@pytest.mark.docker
def test_clean_of_one_run_spares_an_ssh_host_another_run_holds(
    sshd_hosts: tuple[Path, Any],  # noqa: F811
) -> None:
    """Host s1 holds run y's lease (y's nodes live there: one run per host, fixed dirs);
    `clean --run-id x --nodes-file` kills the node processes on s2 and s3 only, and says why
    s1 was left. The old clean killed every host's."""
    from harness.cluster import clean
    from harness.cluster_spec import SSH_ROOT
    from harness.remote import pgrep_command
    from harness.remote_ssh import SshRemote, load_nodes_file

    nodes_file, _ = sshd_hosts
    x, y = f"t{os.getpid()}-x", f"t{os.getpid()}-y"
    node = f"schemasync.node --config {SSH_ROOT}/n1/node.toml"
    remotes = {
        h.name: SshRemote(
            h.name, h.host, port=h.port, user=h.user, key_file=h.key, known_hosts=h.known_hosts
        )
        for h in load_nodes_file(nodes_file)
    }
    try:
        for name, remote in remotes.items():
            lease = f"touch {SSH_ROOT}/lease-{y}; " if name == "s1" else ""
            remote.run(
                f"mkdir -p {SSH_ROOT}; {lease}(setsid nohup python3 -c "
                f"'import time; time.sleep(300)' {node} >/dev/null 2>&1 </dev/null &)"
            )
        removed = clean(run_id=x, hosts=load_nodes_file(nodes_file))
        assert f"s1: not cleaned: held by run {y}" in removed, removed
        alive = {
            name: remote.run(pgrep_command(node), check=False).exit_code == 0
            for name, remote in remotes.items()
        }
        assert alive == {"s1": True, "s2": False, "s3": False}, removed
    finally:
        for remote in remotes.values():
            remote.run(f"rm -f {SSH_ROOT}/lease-{y}", check=False)
            remote.signal(node, "KILL")
            remote.close()


# -- docker: runs at once ----------------------------------------------------------------


def _start_docker_run(store: Path, name: str) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable, "-m", "harness.cli", "run", "--backend", "docker",
        "--time-limit", "15", "--nodes", "3", "--concurrency", "2",
        "--nemesis", "partition", "--nemesis-interval", "4",
        "--no-analyze", "--no-progress", "--store", str(store), "--test-name", name,
    ]  # fmt: skip
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _things(run_id: str) -> dict[str, set[str]]:
    """The run's containers, network and reaper that Docker holds now."""
    import docker

    from harness.reaper import REAPER_LABEL

    client = docker.from_env()
    try:
        label = {"label": f"schemachaos.run={run_id}"}
        return {
            "containers": {
                c.name
                for c in client.containers.list(filters=label, ignore_removed=True)
                if c.status == "running"
            },
            "networks": {n.name for n in client.networks.list(filters=label)},
            "reaper": {
                c.name
                for c in client.containers.list(
                    filters={"label": f"{REAPER_LABEL}={run_id}"}, ignore_removed=True
                )
            },
        }
    finally:
        client.close()


def _wait_until_up(proc: subprocess.Popen[bytes], store: Path, name: str) -> str:
    """The run's id once its three nodes, network and reaper are all up."""
    run_json = store / name / "latest" / "run.json"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            pytest.fail(f"run {name} exited early ({proc.returncode}): {out[-2000:]}")
        if run_json.is_file():
            run_id = str(json.loads(run_json.read_text())["run_id"])
            things = _things(run_id)
            if len(things["containers"]) == 3 and things["networks"] and things["reaper"]:
                return run_id
        time.sleep(0.5)
    pytest.fail(f"run {name} did not come up in 240 s")


def _finish(proc: subprocess.Popen[bytes], timeout: float = 240) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"run did not finish in {timeout} s: {out.decode()[-2000:]}")
    return proc.returncode, out.decode()


def _clean(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "clean", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.docker
@pytest.mark.cluster
def test_two_docker_runs_at_once_and_clean_of_a_third(
    needs_docker: None,
    node_image: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Runs a and b start together beside c. `clean --run-id ""` is refused and touches none;
    `clean --run-id <c>` takes c's containers, network and reaper and leaves a's and b's in
    place; a and b then complete and `analyze` judges both (valid true or false)."""
    stores = {n: tmp_path / n for n in ("a", "b", "c")}
    procs = {n: _start_docker_run(stores[n], n) for n in stores}
    try:
        ids = {n: _wait_until_up(procs[n], stores[n], n) for n in procs}
        before = {n: _things(ids[n]) for n in ("a", "b")}

        refused = _clean("--run-id", "", "--store", str(stores["c"]))
        assert refused.returncode == EXIT_BAD_INPUT, refused
        assert refused.stderr.count("\n") == 1 and "--run-id" in refused.stderr

        cleaned = _clean("--run-id", ids["c"], "--store", str(stores["c"]))
        assert cleaned.returncode == 0, cleaned
        assert _things(ids["c"]) == {"containers": set(), "networks": set(), "reaper": set()}
        for n in ("a", "b"):
            assert _things(ids[n]) == before[n], f"clean of c touched run {n}"
        _finish(procs.pop("c"))  # its nodes gone, it ends however it ends, but it ends
        for n in ("a", "b"):
            code, out = _finish(procs.pop(n))
            assert code == 0, f"run {n}: {out[-2000:]}"
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
    dirs = [str((stores[n] / n / "latest").resolve()) for n in ("a", "b")]
    judged = subprocess.run(
        [sys.executable, "-m", "harness.cli", "analyze", *dirs],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert judged.returncode in (0, 1), judged.stdout[-2000:] + judged.stderr[-2000:]
    for d in dirs:
        results = json.loads((Path(d) / "results.json").read_text())
        assert results["valid"] in (True, False), (d, results.get("errors"))
