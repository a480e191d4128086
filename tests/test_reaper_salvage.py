"""The reaper's collection of a dead run's catalog log (harness.reaper_agent.salvage_catalog),
on nodes scripted through its one seam, the exec in a container: the longest log wins, a node
still catching up is waited for, a log short of a version the history acknowledged is not
written, a container whose exec fails costs only its own answer, a log the run wrote is kept,
and the file is whole and the run directory owner's. The docker path end to end is
tests/test_killed_run_judged.py; `clean`'s, on real containers, tests/test_harness_reaper.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness import reaper_agent
from harness.reaper import salvage_plan
from harness.reaper_agent import COMMAND_S, SalvagePlan, salvage_catalog

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _short_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A collection that never settles waits out SALVAGE_S: shorter here, room for 2 settles."""
    monkeypatch.setattr(reaper_agent, "SALVAGE_S", 3.5)


def _log(versions: int) -> list[dict]:
    return [{"catalog_version": v, "ddl": f"ddl {v}", "tables": {}} for v in range(1, versions + 1)]


class ExecFailed(Exception):
    """What the engine raises for an exec into a container it cannot run one in."""


class ScriptedNodes:
    """Containers whose dump answers, read after read, the next log of their script (the last
    one again once it runs out); `None` is a node that cannot answer, "gone" a container whose
    every exec fails in the engine. Heals are counted; every command must come bounded."""

    def __init__(self, scripts: dict[str, list[list[dict] | str | None]]) -> None:
        self.scripts = scripts
        self.reads = dict.fromkeys(scripts, 0)
        self.heals: list[str] = []

    def __call__(self, cid: str, argv: list[str]) -> tuple[int, bytes, bytes]:
        assert argv[:2] == ["timeout", str(COMMAND_S)], argv
        if "gone" in self.scripts[cid]:
            raise ExecFailed(f"409 Conflict: container {cid} is paused")
        if argv[2] == "sh":
            self.heals.append(cid)
            return 0, b"", b""
        script = self.scripts[cid]
        answer = script[min(self.reads[cid], len(script) - 1)]
        self.reads[cid] += 1
        if answer is None:
            return 1, b"", b"node /var/lib/schemasync/node.toml: TimeoutError: \n"
        return 0, json.dumps(answer).encode() + b"\n", b""


def _acknowledge(run_dir: Path, *versions: int, torn: bool = False) -> None:
    """A history whose ok DDLs acknowledged `versions` (a txn between them), its last line
    torn as a SIGKILLed controller leaves it when `torn`."""
    events = [{"index": 0, "type": "invoke", "f": "ddl", "process": 0, "value": {"stmt": "x"}}]
    for v in versions:
        events.append({"type": "ok", "f": "ddl", "process": 0, "value": {"catalog_version": v}})
        events.append({"type": "ok", "f": "txn", "process": 1, "value": {"catalog_version": 99}})
    text = "".join(json.dumps(e) + "\n" for e in events)
    if torn:
        text += '{"type": "ok", "f": "ddl", "value": {"catalog_version": 77'
    (run_dir / "history.jsonl").write_text(text)


def _plan(run_dir: Path) -> SalvagePlan:
    return salvage_plan(str(run_dir))


def test_the_longest_log_is_written_once_two_reads_agree(tmp_path: Path) -> None:
    nodes = ScriptedNodes({"a": [_log(3)], "b": [_log(5), _log(6)], "c": [None]})
    note = salvage_catalog(nodes, {"a": "n1", "b": "n2", "c": "n3"}, _plan(tmp_path))
    assert note == "catalog.jsonl: 6 versions, from n2"
    lines = (tmp_path / "catalog.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == _log(6)
    assert sorted(nodes.heals) == ["a", "b", "c"]  # every node healed before any read
    assert nodes.reads["b"] == 3  # 5, then 6 (still growing), then 6 again: settled
    assert not list(tmp_path.glob(".*"))  # no temporary file left


def test_a_log_short_of_an_acknowledged_version_is_not_written(tmp_path: Path) -> None:
    """The nodes that applied versions 5 and 6 are down: the survivors' prefix would make the
    checker report lost DDLs; without the file the verdict is unknown, and the note says why."""
    _acknowledge(tmp_path, 2, 6, 4, torn=True)
    nodes = ScriptedNodes({"a": [_log(3)], "b": [_log(4)]})
    note = salvage_catalog(nodes, {"a": "n1", "b": "n2"}, _plan(tmp_path))
    assert note == (
        "catalog.jsonl: not collected (the longest log, from n2, ends at version 4, but "
        "history.jsonl acknowledged version 6: the nodes that hold the rest are down)"
    )
    assert not (tmp_path / "catalog.jsonl").exists()
    assert nodes.reads["b"] >= 3  # read again until the deadline: a node may catch up


def test_a_log_reaching_every_acknowledged_version_is_written(tmp_path: Path) -> None:
    _acknowledge(tmp_path, 1, 4, torn=True)  # the torn line's 77 was never read whole
    nodes = ScriptedNodes({"a": [_log(2), _log(4)], "b": [None]})
    note = salvage_catalog(nodes, {"a": "n1", "b": "n2"}, _plan(tmp_path))
    assert note == "catalog.jsonl: 4 versions, from n1"


def test_a_container_whose_exec_fails_does_not_lose_the_others(tmp_path: Path) -> None:
    nodes = ScriptedNodes({"a": ["gone"], "b": [_log(3)], "c": ["gone"]})
    note = salvage_catalog(nodes, {"a": "n1", "b": "n2", "c": "n3"}, _plan(tmp_path))
    assert note == "catalog.jsonl: 3 versions, from n2"
    assert nodes.heals == ["b"]
    gone = ScriptedNodes({"a": ["gone"]})
    note = salvage_catalog(gone, {"a": "n1"}, _plan(tmp_path / "none"))
    assert note == (
        "catalog.jsonl: not collected (no node answered: n1: exec: ExecFailed: "
        "409 Conflict: container a is paused)"
    )


def test_a_log_the_run_wrote_is_kept(tmp_path: Path) -> None:
    (tmp_path / "catalog.jsonl").write_text("the run's own\n")
    nodes = ScriptedNodes({"a": [_log(9)]})
    assert salvage_catalog(nodes, {"a": "n1"}, _plan(tmp_path)) == "catalog.jsonl: the run wrote it"
    assert (tmp_path / "catalog.jsonl").read_text() == "the run's own\n"
    assert nodes.reads["a"] == 0


def test_no_node_answering_leaves_the_log_missing_and_says_why(tmp_path: Path) -> None:
    nodes = ScriptedNodes({"a": [None], "b": [None]})
    note = salvage_catalog(nodes, {"a": "n1", "b": "n2"}, _plan(tmp_path))
    assert note.startswith("catalog.jsonl: not collected (no node answered: n1: node ")
    assert "TimeoutError" in note and "; n2: " in note
    assert not (tmp_path / "catalog.jsonl").exists()
    assert salvage_catalog(nodes, {}, _plan(tmp_path)) == (
        "catalog.jsonl: not collected (no node container is running)"
    )


def test_the_log_belongs_to_the_run_directory_owner(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root (the reaper's case)")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.chown(run_dir, 4321, 4322)
    salvage_catalog(ScriptedNodes({"a": [_log(2)]}), {"a": "n1"}, _plan(run_dir))
    stat = (run_dir / "catalog.jsonl").stat()
    assert (stat.st_uid, stat.st_gid) == (4321, 4322)


def test_the_plan_travels_as_one_argument() -> None:
    plan = _plan(Path("/schemachaos-run"))
    assert SalvagePlan.from_arg(plan.to_arg()) == plan
    assert "iptables" in plan.heal
    assert "catalog_log" in plan.dump  # the node's own source, run in its container
