"""What one run is made of (`RunOptions`): from the CLI's flags and a scenario file, from a
nightly cell, or rebuilt from a stored run.json by `repro`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads.option_ranges import RANGES, range_problem, schedule_problem


class OptionRangeError(ValueError):
    """A run option outside its range (workloads.option_ranges): the field and why."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why


@dataclass(frozen=True)
class RunOptions:
    """Everything `schemachaos run` takes; also what `repro` rebuilds from a run.json."""

    backend: str = "auto"
    nodes: int = 5
    voters: int = 3
    time_limit_s: float = 60.0
    concurrency: int = 5
    nemesis: tuple[str, ...] = ()
    nemesis_interval_s: float = 10.0
    workload: str = "ddl-dml"
    seed: int = 0
    store: Path = Path("store")
    scenario: Path | None = None
    no_analyze: bool = False
    nodes_file: Path | None = None
    test_name: str | None = None
    target: str = "schemasync"
    spark_master: str = "local[*]"
    spark_remote: str | None = None  # a Spark Connect server instead of a master
    ready_timeout_s: float = 60.0
    local_base: str = "127.0.0.10"
    # the target's own settings, in its own keys (schemasync: delay_duration_ms,
    # max_clock_skew_ms, toggles, ...), checked by the target (contract.target.SettingsChecker)
    target_config: dict[str, Any] = field(default_factory=dict)
    workload_options: dict[str, Any] = field(default_factory=dict)
    nemesis_options: dict[str, Any] = field(default_factory=dict)
    expect: tuple[str, ...] = ()  # anomaly classes a scenario expects (for nightly gating)
    allow: dict[str, str] = field(default_factory=dict)  # known findings tolerated: class -> why

    def __post_init__(self) -> None:
        """Every path builds a RunOptions: none of them can carry a value out of range."""
        for name in RANGES:
            why = range_problem(name, getattr(self, name))
            if why is not None:
                raise OptionRangeError(name, why)


def shape_problem(opts: RunOptions) -> OptionRangeError | None:
    """What the options' values refuse together: more voters than nodes (unless a nodes file
    says how many nodes there are: the voters are then capped by it), a fault schedule too
    long to build (None: nothing)."""
    if opts.voters > opts.nodes and opts.nodes_file is None:
        return OptionRangeError("voters", f"{opts.voters} voters but only {opts.nodes} nodes")
    if opts.nemesis:
        why = schedule_problem(opts.time_limit_s, opts.nemesis_interval_s)
        if why is not None:
            return OptionRangeError("nemesis_interval_s", why)
    return None


def options_from_run_json(run_json_path: Path, store: Path | None = None) -> RunOptions:
    """RunOptions that repeat a stored run: same seed, nodes, nemesis, workload, config (as
    run.json has it: `harness.target_settings.own_settings` keeps what the target takes)."""
    data = json.loads(run_json_path.read_text())
    config = dict(data.get("config", {}))
    nemesis = data.get("nemesis", {})
    workload = data.get("workload", {})
    options = data.get("options", {})
    scenario = workload.get("scenario")
    target = str(data.get("target", "schemasync"))
    return RunOptions(
        backend=data.get("backend", "auto"),
        nodes=int(options.get("nodes", len(data.get("nodes", [])) or 5)),
        voters=int(options.get("voters", len(data.get("voters", [])) or 3)),
        time_limit_s=float(workload.get("time_limit_s", 60)),
        concurrency=int(workload.get("concurrency", 5)),
        nemesis=tuple(nemesis.get("kinds", [])),
        nemesis_interval_s=float(nemesis.get("interval_s", options.get("nemesis_interval_s", 10))),
        workload=str(workload.get("name", "ddl-dml")),
        seed=int(data.get("seed", 0)),
        store=store or run_json_path.parent.parent.parent,
        scenario=Path(scenario) if scenario else None,
        nodes_file=Path(options["nodes_file"]) if options.get("nodes_file") else None,
        local_base=str(options.get("local_base", "127.0.0.10")),
        ready_timeout_s=float(options.get("ready_timeout_s", 60.0)),
        test_name=str(data.get("test")) if data.get("test") else None,
        target=target,
        target_config=config,
        workload_options=dict(workload.get("options", {})),
        nemesis_options=dict(nemesis.get("options") or {}),
        expect=tuple(data.get("expect") or ()),
        allow=dict(data.get("allow") or {}),
    )
