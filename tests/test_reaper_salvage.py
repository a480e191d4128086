"""The reaper's collection of a dead run's catalog log (harness.reaper_agent.salvage_catalog),
on nodes scripted through its one seam, the exec in a container: the longest log wins, a node
still catching up is waited for, a log the run wrote is kept, and the file is whole and the
run directory owner's. The docker path end to end is tests/test_killed_run_judged.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.reaper import salvage_plan
from harness.reaper_agent import SalvagePlan, salvage_catalog

pytestmark = pytest.mark.timeout(60)


def _log(versions: int) -> list[dict]:
    return [{"catalog_version": v, "ddl": f"ddl {v}", "tables": {}} for v in range(1, versions + 1)]


class ScriptedNodes:
    """Containers whose dump answers, read after read, the next log of their script (the last
    one again once it runs out); `None` is a node that cannot answer. Heals are counted."""

    def __init__(self, scripts: dict[str, list[list[dict] | None]]) -> None:
        self.scripts = scripts
        self.reads = dict.fromkeys(scripts, 0)
        self.heals: list[str] = []

    def __call__(self, cid: str, argv: list[str]) -> tuple[int, bytes, bytes]:
        if argv[0] == "sh":
            self.heals.append(cid)
            return 0, b"", b""
        script = self.scripts[cid]
        answer = script[min(self.reads[cid], len(script) - 1)]
        self.reads[cid] += 1
        if answer is None:
            return 1, b"", b"node /var/lib/schemasync/node.toml: TimeoutError: \n"
        return 0, json.dumps(answer).encode() + b"\n", b""


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
