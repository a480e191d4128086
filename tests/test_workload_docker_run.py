"""A real 30 s run on 5 docker nodes through the harness: the recorded run directory meets the
contract (JSON Schema of events, catalog lines and run.json; pairing; no reuse after info)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from contract.history_shape import json_schema
from tests.test_history_recorder import check_contract
from workloads.history import read_history


def validator_for(definition: str) -> jsonschema.protocols.Validator:
    schema = json_schema()
    sub = {"$ref": f"#/$defs/{definition}", "$defs": schema["$defs"]}
    return jsonschema.validators.validator_for(schema)(sub)


@pytest.mark.docker
@pytest.mark.timeout(400)
def test_a_30s_docker_run_records_a_history_that_meets_the_contract(
    tmp_path: Path, needs_docker: None
) -> None:
    from harness.run import RunOptions, run_test

    opts = RunOptions(
        backend="docker",
        time_limit_s=30.0,
        concurrency=8,
        workload="ddl-dml",
        seed=3,
        store=tmp_path / "store",
        no_analyze=True,
        test_name="workload-contract",
        workload_options={"ddl_interval_s": 0.5},
    )
    outcome = run_test(opts)
    run_dir = outcome.run_dir
    assert outcome.exit_code == 0, (run_dir / "controller.log").read_text()[-3000:]
    events = read_history(run_dir / "history.jsonl")
    check_contract(events, schema_every=1)
    assert events[-1]["time"] >= 30e9  # the whole time limit is recorded

    by = {(e["f"], e["type"]) for e in events}
    assert {("ddl", "ok"), ("txn", "ok"), ("probe", "ok"), ("final-read", "ok")} <= by
    nodes = json.loads((run_dir / "run.json").read_text())["nodes"]
    probed = {e["node"] for e in events if e["f"] == "probe" and e["type"] == "ok"}
    assert probed == set(nodes)

    validator_for("run").validate(json.loads((run_dir / "run.json").read_text()))
    catalog = [json.loads(line) for line in (run_dir / "catalog.jsonl").read_text().splitlines()]
    line_validator = validator_for("catalog_line")
    for line in catalog:
        line_validator.validate(line)
    activation = {c["catalog_version"]: c["activation_ts"] for c in catalog}
    for e in events:
        if e["f"] == "ddl" and e["type"] == "ok":
            assert activation[e["value"]["catalog_version"]] == e["value"]["activation_ts"]
    # Final reads cover every table of the newest catalog, at one ts after every ack.
    newest = max(catalog, key=lambda c: c["catalog_version"])
    read_tables = {
        e["value"]["table"]
        for e in events
        if e["f"] == "final-read" and e["type"] == "ok" and "index" not in e["value"]
    }
    assert read_tables == set(newest["tables"])
