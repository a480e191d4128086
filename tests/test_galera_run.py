"""A short galera-toi run end to end, as `schemachaos run --scenario` plays it: partitions and
kills through the nemesis runner, heal-all, the merge back into one primary component, final
reads, teardown. Not analyzed here (Spark is slow to start; the scenario's verdict is in
docs/galera.md): this proves the harness drives the target through faults and gets every node
back, with nothing left behind.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness.run import RunOptions, run_test
from workloads.history import read_history
from workloads.scenario import load_scenario

pytestmark = [pytest.mark.docker]

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "galera-toi.toml"


def containers_of(run_id: str) -> list[str]:
    from harness.remote_docker import RUN_LABEL, docker_client

    found = docker_client().containers.list(
        all=True, filters={"label": f"{RUN_LABEL}={run_id}"}, ignore_removed=True
    )
    return [c.name for c in found]


@pytest.mark.timeout(400)
def test_a_toi_run_with_partitions_and_kills_ends_with_every_node_primary(
    tmp_path: Path,
) -> None:
    scenario = load_scenario(SCENARIO)
    fields = {k: v for k, v in scenario.run_options_fields().items() if v is not None}
    opts = dataclasses.replace(
        RunOptions(**fields),
        backend="docker",
        store=tmp_path / "store",
        time_limit_s=16.0,
        seed=21,  # its shuffle plays the partition first: a kill's restart (SST) takes ~20 s
        nemesis=("partition", "kill"),
        nemesis_interval_s=3.0,
        no_analyze=True,
    )
    outcome = run_test(opts)
    log = (outcome.run_dir / "controller.log").read_text()
    assert outcome.exit_code == 0, log[-3000:]
    history = read_history(outcome.run_dir / "history.jsonl")
    nemesis = [e for e in history if e["process"] == "nemesis"]
    kinds = {e["value"].get("kind") for e in nemesis if e["f"].startswith("start-")}
    assert kinds == {"partition", "kill"}, [e["f"] for e in nemesis]
    (heal,) = [e["value"] for e in nemesis if e["f"] == "heal-all"]
    assert set(heal["rules_remaining"].values()) == {0}, heal
    # catalog_log() waits for the merge and names any node outside the primary component
    assert "not Synced in the primary component" not in log, log[-3000:]
    finals = [e for e in history if e["f"] == "final-read" and e["type"] != "invoke"]
    assert finals and all(e["type"] == "ok" for e in finals), finals
    # per-node copies: every node read whole, and each of its tables probed after (the final
    # probes replica-divergence compares schemas by)
    assert {e["node"] for e in finals} == {"n1", "n2", "n3"}
    first_final = min(e["index"] for e in history if e["f"] == "final-read")
    final_probes = [e for e in history if e["f"] == "probe" and e["index"] > first_final]
    probed = {(e["node"], e["value"]["table"]) for e in final_probes if e["type"] == "ok"}
    read = {(e["node"], e["value"]["table"]) for e in finals if "index" not in e["value"]}
    assert probed == read, (probed, read)
    assert any(e["f"] == "ddl" and e["type"] == "ok" for e in history)
    catalog = [json.loads(line) for line in (outcome.run_dir / "catalog.jsonl").open()]
    assert [c["catalog_version"] for c in catalog] == list(range(1, len(catalog) + 1))
    run = json.loads((outcome.run_dir / "run.json").read_text())
    assert run["clock"] == "none" and run["target"] == "galera"
    assert containers_of(run["run_id"]) == []
