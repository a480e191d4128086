"""Scenarios: a whole chaos test as one TOML file (target config, faults, workload, seed).

A scenario is data, so a run can be named, stored, repeated and gated on. Flags given on the
command line override its values (`apply_overrides`). Its field names are the harness's
`RunOptions` names, so `run_options_fields()` feeds `RunOptions(**...)` directly. The file's
shape is a pydantic model (`ScenarioFile`): bad input gives one `ConfigError` naming the
file, the key and what is allowed, never a traceback.

    name = "no-safe-time-wait"            # optional; defaults to the file name
    description = "..."
    seed = 1
    time_limit_s = 30
    concurrency = 12
    expect = ["ap-violation"]             # anomaly classes it must produce ([] = valid)
    [allow]                               # known findings of the system under test that a
    schema-conformance = "why"            # gate tolerates, each with its reason
    [target]                              # name, nodes, voters; every other key is the
    toggles = ["no-safe-time-wait"]       # target's own setting (target_config: schemasync's
    delay_ms = 500                        # DD, CSmax, toggles, ...), checked by that target
                                          # (contract.target.SettingsChecker)
    [nemesis]
    kinds = ["lagging-learner"]
    interval_s = 5
    [nemesis.options]                     # free-form parameters for the nemeses
    [workload]
    name = "ddl-dml"                      # any other key is a workload option
    ddl_interval_s = 0.5

Every number has a finite range (workloads.option_ranges, the same as the flags'): seed
0..2^63-1 (an int64, as run.json holds it), target.nodes and target.voters 1..64 (voters <=
nodes), concurrency 1..1024, time_limit_s > 0 and <= 604800 (7 days), nemesis.interval_s
0.001..86400, and at most 302400 faults a run (time_limit_s / (2 * interval_s): 7 days at 1 s).
NaN and infinities (TOML's `nan`, `inf`) are refused like any value out of range.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
)

from checker.anomaly_classes import ANOMALY_CLASSES, UNAVAILABILITY
from contract.config_error import WHOLE_FILE, ConfigError, first_problem, one_of
from workloads.option_ranges import RANGES, range_problem, schedule_problem

# What `expect` may name: the anomaly classes, plus the one liveness finding
EXPECTABLE: tuple[str, ...] = (*ANOMALY_CLASSES, UNAVAILABILITY)


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str = ""
    path: str | None = None
    seed: int = 0
    time_limit_s: float = 60.0
    concurrency: int = 10
    backend: str = "auto"
    target: str = "schemasync"
    nodes: int = 5
    voters: int = 3
    target_config: Mapping[str, Any] = field(default_factory=dict)
    nemesis: tuple[str, ...] = ()
    nemesis_interval_s: float = 10.0
    nemesis_options: Mapping[str, Any] = field(default_factory=dict)
    workload: str = "ddl-dml"
    workload_options: Mapping[str, Any] = field(default_factory=dict)
    expect: tuple[str, ...] = ()
    allow: Mapping[str, str] = field(default_factory=dict)

    def run_options_fields(self) -> dict[str, Any]:
        """The values under the harness's RunOptions names (plain dicts and tuples)."""
        return {
            "backend": self.backend,
            "nodes": self.nodes,
            "voters": self.voters,
            "time_limit_s": self.time_limit_s,
            "concurrency": self.concurrency,
            "nemesis": self.nemesis,
            "nemesis_interval_s": self.nemesis_interval_s,
            "workload": self.workload,
            "seed": self.seed,
            "scenario": Path(self.path) if self.path else None,
            "test_name": self.name,
            "target": self.target,
            "target_config": json_plain(self.target_config),
            "workload_options": json_plain(self.workload_options),
        }

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Mapping):
                value = json_plain(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out


def json_plain(value: Any) -> Any:
    """Mappings (read-only ones too) as dicts, tuples as lists, all the way down."""
    if isinstance(value, Mapping):
        return {str(k): json_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_plain(v) for v in value]
    return value


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TargetTable(BaseModel):
    """`[target]`: the harness's keys; any other key is the target's own setting (checked by
    that target's settings model when the run starts)."""

    model_config = ConfigDict(extra="allow", strict=True)

    name: StrictStr | None = None
    nodes: Annotated[StrictInt, Field(ge=1)] | None = None
    voters: Annotated[StrictInt, Field(ge=1)] | None = None


class NemesisTable(_Table):
    kinds: list[StrictStr] | None = None
    interval_s: Annotated[float, Field(gt=0)] | None = None
    options: dict[str, Any] | None = None


class WorkloadTable(BaseModel):
    """`[workload]`: its name; any other key is a workload option (the workload checks it)."""

    model_config = ConfigDict(extra="allow", strict=True)

    name: StrictStr | None = None


class ScenarioFile(_Table):
    """A scenario file's shape: unknown keys and wrong types are refused, naming the key."""

    name: StrictStr | None = None
    description: StrictStr | None = None
    seed: Annotated[StrictInt, Field(ge=0)] | None = None
    time_limit_s: Annotated[float, Field(gt=0)] | None = None
    concurrency: Annotated[StrictInt, Field(ge=1)] | None = None
    backend: StrictStr | None = None  # a name in the harness's registry (harness.backends)
    expect: (
        Annotated[list[StrictStr], AfterValidator(one_of(EXPECTABLE, "anomaly class"))] | None
    ) = None
    allow: dict[StrictStr, Annotated[StrictStr, Field(min_length=1)]] | None = None
    target: TargetTable = TargetTable()
    nemesis: NemesisTable = NemesisTable()
    workload: WorkloadTable = WorkloadTable()


# [target] keys that are Scenario fields under another name; the rest keep theirs
_TARGET_FIELD = {"name": "target"}


def load_scenario(path: Path) -> Scenario:
    """Read and check a scenario file; raises ConfigError naming the file and the key."""
    where = str(path)
    if Path(path).exists() and not (Path(path).is_file() or Path(path).is_dir()):
        # a FIFO (or a device) would block the read below forever
        raise ConfigError(WHOLE_FILE, "not a regular file", file=where)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(WHOLE_FILE, "no such file", file=where) from None
    except OSError as e:
        raise ConfigError(WHOLE_FILE, f"cannot read: {e.strerror or e}", file=where) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(WHOLE_FILE, f"not valid TOML: {e}", file=where) from None
    return scenario_from_dict(data, where, default_name=Path(path).stem)


def load_run_options(path: Path) -> dict[str, Any]:
    """A scenario file as `RunOptions` keyword arguments, nemesis options and `expect` included:
    one reading shared by `schemachaos run --scenario` and the nightly matrix's cells."""
    scenario = load_scenario(path)
    fields = {
        **scenario.run_options_fields(),
        "nemesis_options": json_plain(scenario.nemesis_options),
        "expect": scenario.expect,
        "allow": json_plain(scenario.allow),
    }
    return {key: value for key, value in fields.items() if value is not None}


def scenario_from_dict(data: Mapping[str, Any], where: str, default_name: str) -> Scenario:
    """A Scenario from parsed TOML (what `load_scenario` does after reading the file)."""
    try:
        parsed = ScenarioFile.model_validate(data)
    except ValidationError as e:
        key, why = first_problem(ScenarioFile, e)
        raise ConfigError(key, why, file=where) from None
    values: dict[str, Any] = {"name": default_name, "path": where}
    top = parsed.model_dump(exclude={"target", "nemesis", "workload"}, exclude_none=True)
    values.update(top)
    target = parsed.target.model_dump(exclude_none=True)
    for key in parsed.target.model_extra or {}:
        target.pop(key, None)
    for key, value in target.items():
        values[_TARGET_FIELD.get(key, key)] = value
    values["target_config"] = json_plain(parsed.target.model_extra or {})
    nemesis = parsed.nemesis
    if nemesis.kinds is not None:
        values["nemesis"] = nemesis.kinds
    if nemesis.interval_s is not None:
        values["nemesis_interval_s"] = nemesis.interval_s
    if nemesis.options is not None:
        values["nemesis_options"] = json_plain(nemesis.options)
    if parsed.workload.name is not None:
        values["workload"] = parsed.workload.name
    values["workload_options"] = json_plain(parsed.workload.model_extra or {})
    return _checked(values, where)


_OVERRIDABLE = {f.name for f in dataclasses.fields(Scenario)} - {"path"}


def apply_overrides(scenario: Scenario, overrides: Mapping[str, Any]) -> Scenario:
    """The scenario with command-line values on top; a None value means "flag not given".
    Keys are Scenario field names (`time_limit_s`, `target_config`, `nemesis`, `seed`, ...)."""
    changes: dict[str, Any] = {}
    for key, value in overrides.items():
        if key not in _OVERRIDABLE:
            raise ConfigError(key, "not a scenario field", file="command line")
        if value is not None:
            changes[key] = value
    if not changes:
        return scenario
    values = {f.name: getattr(scenario, f.name) for f in dataclasses.fields(Scenario)}
    values.update(changes)
    return _checked(values, f"{scenario.path or scenario.name} (with command-line flags)")


def _checked(values: dict[str, Any], where: str) -> Scenario:
    def need(key: str, ok: bool, why: str) -> None:
        if not ok:
            raise ConfigError(key, f"{why}, got {values[key]!r}", file=where)

    def ranged(key: str) -> None:
        """Within its range (workloads.option_ranges), named by the file's key."""
        if key not in values:
            return
        why = range_problem(key, values[key])
        if why is not None:
            raise ConfigError(RANGES[key].key, why, file=where)
        if not RANGES[key].integer:
            values[key] = float(values[key])

    def strings(key: str, allowed: tuple[str, ...] | None) -> None:
        if key not in values:
            return
        v = values[key]
        ok = isinstance(v, list | tuple) and all(isinstance(x, str) for x in v)
        need(key, ok, "needs a list of strings")
        if allowed is not None:
            bad = [x for x in v if x not in allowed]
            if bad:
                raise ConfigError(key, f"unknown {bad} (known: {', '.join(allowed)})", file=where)
        values[key] = tuple(v)

    for key in ("name", "description", "target", "workload"):
        if key in values:
            need(key, isinstance(values[key], str), "needs a string")
    for key in ("seed", "concurrency", "nodes", "voters", "time_limit_s", "nemesis_interval_s"):
        ranged(key)
    strings("nemesis", None)
    strings("expect", EXPECTABLE)
    _check_allow(values, where)
    if "backend" in values:  # which names exist is the harness's registry's to say
        need("backend", isinstance(values["backend"], str), "needs a string")
    if values.get("voters", 3) > values.get("nodes", 5):
        raise ConfigError("voters", "more voters than nodes", file=where)
    if values.get("nemesis"):
        too_long = schedule_problem(
            values.get("time_limit_s", 60.0), values.get("nemesis_interval_s", 10.0)
        )
        if too_long is not None:
            raise ConfigError(RANGES["nemesis_interval_s"].key, too_long, file=where)
    if "workload" in values or "workload_options" in values:
        _check_workload(values, where)
    return Scenario(**values)


def _check_allow(values: dict[str, Any], where: str) -> None:
    """`allow` names anomaly classes, each with a reason, and none the scenario also expects
    (a class is required or tolerated, not both)."""
    allow = values.get("allow") or {}
    bad = [c for c in allow if c not in ANOMALY_CLASSES]
    if bad:
        raise ConfigError(
            f"allow.{bad[0]}",
            f"not an anomaly class (known: {', '.join(ANOMALY_CLASSES)})",
            file=where,
        )
    both = [c for c in allow if c in values.get("expect", ())]
    if both:
        why = "also in expect: a class is required or tolerated, not both"
        raise ConfigError(f"allow.{both[0]}", why, file=where)
    values["allow"] = dict(allow)


def _check_workload(values: dict[str, Any], where: str) -> None:
    from workloads import build_generator

    name = values.get("workload", "ddl-dml")
    options = dict(values.get("workload_options", {}))
    try:
        build_generator(name, values.get("seed", 0), values.get("concurrency", 10), options)
    except ConfigError as e:
        raise ConfigError(f"workload.{e.key}", e.why, file=where) from None
    except ValueError as e:
        raise ConfigError("workload.name", str(e), file=where) from None
