"""write_synthetic_run's knobs for the report benchmark: monitor samples and stale probes come on
a random stream of their own, so the model's run is the same with them as without; a stale probe
(one with an explicit ts) answers the catalog version before the one at its ts (an ap-violation
and nothing else), and every monitor sample reports the catalog version active at the safe time
it reports."""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import Any

import pytest

from synthetic import generate_run, write_synthetic_run
from synthetic.model import MS

EVENTS = 3000
MONITOR_MS = 250


def _events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]


def _version_at(run: Path) -> Any:
    catalog = [json.loads(line) for line in (run / "catalog.jsonl").read_text().splitlines()]
    acts = [c["activation_ts"] for c in catalog]
    versions = [c["catalog_version"] for c in catalog]
    return lambda ts: versions[bisect.bisect_right(acts, ts) - 1]


def test_extras_leave_the_models_run_alone(tmp_path: Path) -> None:
    plain, extra = tmp_path / "plain", tmp_path / "extra"
    generate_run(plain, seed=3, events=EVENTS)
    written = write_synthetic_run(
        extra, 3, events=EVENTS, monitor_ms=MONITOR_MS, stale_probe_rate=0.2
    )
    assert written.stale_probe_processes
    for name in ("catalog.jsonl", "run.json"):
        assert (plain / name).read_bytes() == (extra / name).read_bytes(), name
    stale = set(written.stale_probe_processes)

    def model_events(run: Path) -> list[dict[str, Any]]:
        kept = []
        for e in _events(run):
            if e["process"] == "monitor":
                continue
            e.pop("index")
            if e["process"] in stale and e["type"] == "ok":
                e["value"].pop("catalog_version")
            kept.append(e)
        return kept

    assert model_events(plain) == model_events(extra)


def test_stale_probes_and_monitor_samples_tell_the_truth(tmp_path: Path) -> None:
    run = tmp_path / "run"
    written = write_synthetic_run(
        run, 5, events=EVENTS, monitor_ms=MONITOR_MS, stale_probe_rate=0.1
    )
    events = _events(run)
    assert written.events == len(events)
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)
    version_at = _version_at(run)
    by_process: dict[Any, list[dict[str, Any]]] = {}
    for e in events:
        by_process.setdefault(e["process"], []).append(e)
    for p in written.stale_probe_processes:
        invoke, ok = by_process[p]
        assert (invoke["type"], ok["type"], ok["f"]) == ("invoke", "ok", "probe")
        assert invoke["value"]["ts"] == ok["value"]["ts"] is not None  # ap-violation alone
        assert ok["value"]["catalog_version"] == version_at(ok["value"]["ts"]) - 1
    samples = by_process["monitor"]
    times = [s["time"] for s in samples]
    assert times == [MONITOR_MS * MS * (i + 1) for i in range(len(samples))]
    assert times[-1] > events[-1]["time"] - MONITOR_MS * MS
    for s in samples:
        for node, view in s["value"].items():
            assert view["catalog_version"] == version_at(view["safe_ts"]), (node, s["time"])


@pytest.mark.parametrize(
    ("knob", "value"), [("monitor_ms", 0), ("stale_probe_rate", 1.5), ("fault", "no-such")]
)
def test_bad_knobs_are_refused(tmp_path: Path, knob: str, value: Any) -> None:
    with pytest.raises(ValueError, match=knob if knob != "fault" else "unknown fault"):
        write_synthetic_run(tmp_path / "run", 1, **{knob: value})
