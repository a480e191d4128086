"""`schemachaos nightly --matrix FILE`: scenarios x nemeses x seeds, then one Spark summary.

The matrix is read and checked whole before the first cell runs (a pydantic model: unknown
keys, wrong types and names that refer to nothing are bad input naming file, key and what is
allowed). Every cell is one `harness.run.run_test`; a cell that crashes is recorded and the
matrix goes on. The summary (`reports.nightly`) only reads what the cells left.
"""

from __future__ import annotations

import logging
import time
import tomllib
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from pydantic import (
    BaseModel,
    ConfigDict,
    StrictFloat,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
)

from contract.config_error import WHOLE_FILE, ConfigError
from contract.exit_codes import EXIT_CRASH
from contract.rundir import RESULTS, RUN_JSON
from contract.target import SettingsChecker, SettingsError
from harness.backends import scenario_run_options
from harness.options import RunOptions
from harness.resolved_run import ResolvedRun, resolve_run
from harness.run import run_test
from nemesis import parse_kinds
from reports.expectation import allow_of, expect_of
from reports.nightly import CellOutcome, read_json, write_summary
from targets.registry import TARGETS, load_target
from workloads import WORKLOADS
from workloads.option_ranges import range_problem
from workloads.scenario import EXPECTABLE

log = logging.getLogger("schemachaos.nightly")

RUN_OPTION_FIELDS = tuple(f.name for f in fields(RunOptions))
SCENARIO_KEYS = ("name", "workload", "scenario_file", "toggles", "expect", "nemeses")
RUN_OPTIONS = TypeAdapter(RunOptions)  # the types of the RunOptions fields a row may set


# -- the file's shape ------------------------------------------------------------------------


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class NemesisRow(_Row):
    name: StrictStr
    kinds: list[StrictStr] = []
    interval_s: StrictFloat | StrictInt | None = None


class ScenarioRow(BaseModel):
    """A scenario row: its own keys, and any RunOptions field (checked by name here, by type
    when the cell's RunOptions is built)."""

    model_config = ConfigDict(extra="allow", strict=True)

    name: StrictStr
    workload: StrictStr | None = None
    scenario_file: StrictStr | None = None
    toggles: list[StrictStr] = []
    expect: list[StrictStr] = []
    nemeses: list[StrictStr] | None = None


class MatrixFile(_Row):
    seeds: list[StrictInt] = [0]
    defaults: dict[str, Any] = {}
    scenario: list[ScenarioRow]
    nemesis: list[NemesisRow] = [NemesisRow(name="none")]


# -- what runs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """A row of the matrix: what to run and which anomaly classes it must produce."""

    name: str
    workload: str | None = None
    scenario_file: str | None = None
    toggles: tuple[str, ...] = ()
    expect: tuple[str, ...] = ()  # empty: the run must be valid
    nemeses: tuple[str, ...] | None = None  # restrict to these nemesis names
    options: Mapping[str, Any] = field(default_factory=dict)  # extra RunOptions fields
    file_options: Mapping[str, Any] = field(default_factory=dict)  # its scenario file's, read


@dataclass(frozen=True)
class NemesisSpec:
    name: str
    kinds: tuple[str, ...] = ()
    interval_s: float | None = None


@dataclass(frozen=True)
class NightlyCell:
    scenario: Scenario
    nemesis: NemesisSpec
    seed: int
    defaults: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.scenario.name}--{self.nemesis.name}--s{self.seed}"


@dataclass(frozen=True)
class Matrix:
    scenarios: tuple[Scenario, ...]
    nemeses: tuple[NemesisSpec, ...]
    seeds: tuple[int, ...]
    defaults: Mapping[str, Any]

    def cells(self) -> list[NightlyCell]:
        out = []
        for sc in self.scenarios:
            for nem in self.nemeses:
                if sc.nemeses is not None and nem.name not in sc.nemeses:
                    continue
                for seed in self.seeds:
                    out.append(NightlyCell(sc, nem, seed, self.defaults))
        return out


def _where(loc: Sequence[int | str]) -> str:
    """pydantic's location as the file says it: `scenario[2].toggles`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _explain(path: Path, error: ValidationError) -> ConfigError:
    first = error.errors()[0]
    loc = list(first["loc"])
    # a union's error names the member type tried last: the key is what the reader needs
    loc = [p for p in loc if not (isinstance(p, str) and p[:1].islower() and "[" in p)]
    where = _where(loc) or WHOLE_FILE
    if first["type"] == "extra_forbidden":  # only rows that forbid extras: nemesis, the file
        model = NemesisRow if loc and loc[0] == "nemesis" else MatrixFile
        allowed = ", ".join(model.model_fields)
        return ConfigError(where, f"unknown key (allowed: {allowed})", file=path)
    return ConfigError(where, first["msg"], file=path)


def _name_problem(
    path: Path, where: str, key: str | None, given: Sequence[str], known: Sequence[str]
) -> None:
    """Every name given is one of known, else ConfigError (key None: the names are keys)."""
    unknown = [g for g in given if g not in known]
    if unknown:
        at, what = (where, "unknown key") if key is None else (f"{where}.{key}", "unknown")
        allowed = ", ".join(dict.fromkeys(known))
        names = ", ".join(map(repr, unknown))
        raise ConfigError(at, f"{what} {names} (allowed: {allowed})", file=path)


def _check_toggles(path: Path, where: str, target_name: str, toggles: Sequence[str]) -> None:
    """A row's `toggles` are its target's setting: that target checks the names."""
    if target_name not in TARGETS:
        return  # the row's `target` is refused with the cell's other options
    target = load_target(target_name)
    try:
        if not isinstance(target, SettingsChecker):
            raise SettingsError("toggles", f"the {target_name} target has no toggles")
        target.check_settings({"toggles": list(toggles)})
    except SettingsError as e:
        raise ConfigError(f"{where}.{e.key}", e.why, file=path) from None


def _check_types(path: Path, where: str, fields: Mapping[str, Any]) -> None:
    """RunOptions fields given in the matrix have their field's type, and a number its range
    (workloads.option_ranges: the flags' and the scenario files')."""
    for key, value in fields.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            _check_range(path, f"{where}.{key}", key, value)
    try:
        RUN_OPTIONS.validate_python(dict(fields))
    except ValidationError as e:
        first = e.errors()[0]
        raise ConfigError(f"{where}.{_where(first['loc'])}", first["msg"], file=path) from None


def _check_range(path: Path, where: str, field: str, value: object) -> None:
    why = range_problem(field, value)
    if why is not None:
        raise ConfigError(where, why, file=path)


def _scenario_file(path: Path, where: str, scenario_file: str | None) -> dict[str, Any]:
    """The run options of a row's scenario file, read once with the matrix (its cells all
    start from them); its problem is named under the row's `scenario_file` key."""
    if not scenario_file:
        return {}
    try:
        return scenario_run_options(Path(scenario_file))
    except ConfigError as e:
        raise ConfigError(f"{where}.scenario_file", str(e), file=path) from e


def _refuse_duplicates(path: Path, table: str, names: Sequence[str]) -> None:
    """A cell is named by its scenario, nemesis and seed, and its run, directory and report
    are found by that name: two rows with one name would silently share one run."""
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise ConfigError(f"{table}[{i}].name", f"{name!r} is already used", file=path)
        seen.add(name)


def load_matrix(path: Path) -> Matrix:
    """Read and check the whole matrix; ConfigError names the file, the key and what is
    allowed. A scenario that selects no cell, or a name that refers to nothing (a nemesis
    row, a toggle, a workload, an anomaly class, a fault kind), is an error, never a skip."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(WHOLE_FILE, f"cannot read: {e.strerror or e}", file=path) from e
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:  # the line and column
        raise ConfigError(WHOLE_FILE, f"not valid TOML: {e}", file=path) from e
    try:
        parsed = MatrixFile.model_validate(raw)
    except ValidationError as e:
        raise _explain(path, e) from None
    if not parsed.scenario:
        raise ConfigError("scenario", "no [[scenario]] entry", file=path)
    _name_problem(path, "defaults", None, list(parsed.defaults), RUN_OPTION_FIELDS)
    _check_types(path, "defaults", parsed.defaults)
    nemesis_names = [n.name for n in parsed.nemesis]
    _refuse_duplicates(path, "nemesis", nemesis_names)
    _refuse_duplicates(path, "scenario", [s.name for s in parsed.scenario])
    nemeses = []
    for i, n in enumerate(parsed.nemesis):
        try:
            parse_kinds(n.kinds)
        except ValueError as e:
            raise ConfigError(f"nemesis[{i}].kinds", str(e), file=path) from e
        if n.interval_s is not None:
            _check_range(path, f"nemesis[{i}].interval_s", "nemesis_interval_s", n.interval_s)
        interval = float(n.interval_s) if n.interval_s is not None else None
        nemeses.append(NemesisSpec(n.name, tuple(n.kinds), interval))
    scenarios = []
    for i, s in enumerate(parsed.scenario):
        where = f"scenario[{i}] ({s.name})"
        extra = dict(s.model_extra or {})
        _name_problem(path, where, None, list(extra), SCENARIO_KEYS + RUN_OPTION_FIELDS)
        if s.toggles:
            _check_toggles(path, where, str(extra.get("target", "schemasync")), s.toggles)
        _name_problem(path, where, "expect", s.expect, EXPECTABLE)
        _name_problem(path, where, "nemeses", s.nemeses or [], nemesis_names)
        if s.workload is not None:
            _name_problem(path, where, "workload", [s.workload], list(WORKLOADS))
        if s.nemeses is not None and not s.nemeses:
            raise ConfigError(f"{where}.nemeses", "empty, so it selects no cell", file=path)
        _check_types(path, where, extra)
        scenarios.append(
            Scenario(
                name=s.name,
                workload=s.workload,
                scenario_file=s.scenario_file,
                toggles=tuple(s.toggles),
                expect=tuple(s.expect),
                nemeses=tuple(s.nemeses) if s.nemeses is not None else None,
                options=extra,
                file_options=_scenario_file(path, where, s.scenario_file),
            )
        )
    if not parsed.seeds:
        raise ConfigError("seeds", "empty, so no scenario selects a cell", file=path)
    for i, seed in enumerate(parsed.seeds):
        _check_range(path, f"seeds[{i}]", "seed", seed)
    return Matrix(tuple(scenarios), tuple(nemeses), tuple(parsed.seeds), dict(parsed.defaults))


# -- running the cells -----------------------------------------------------------------------


class RunOutcomeLike(Protocol):
    """What harness.run.run_test returns (RunOutcome): read-only is enough."""

    @property
    def run_dir(self) -> Path: ...

    @property
    def exit_code(self) -> int: ...


Runner = Callable[[NightlyCell, Path], RunOutcomeLike]


@dataclass(frozen=True)
class NightlyResult:
    """The night's gate: exit_code 0 all cells as expected, 1 a mismatch, 2 an unknown, 255 the
    checker crashed (whatever verdicts it left)."""

    exit_code: int
    summary_dir: Path
    outcomes: tuple[CellOutcome, ...]
    summary: Mapping[str, Any]

    def __int__(self) -> int:
        return self.exit_code


def cell_options(cell: NightlyCell, store: Path, backend: str | None = None) -> RunOptions:
    """The cell's RunOptions: its scenario file, then the matrix defaults, the row's own
    options, and what the cell fixes (nemesis, seed, test name)."""
    given: dict[str, Any] = {}
    if cell.scenario.scenario_file:
        given.update(cell.scenario.file_options)
        given["scenario"] = Path(cell.scenario.scenario_file)
    given.update(cell.defaults)
    given.update(cell.scenario.options)
    if cell.scenario.workload:
        given["workload"] = cell.scenario.workload
    if cell.scenario.toggles:
        given["target_config"] = {
            **given.get("target_config", {}),
            "toggles": list(cell.scenario.toggles),
        }
    if cell.scenario.expect:  # into run.json: the report and junit.xml judge by it too
        given["expect"] = cell.scenario.expect
    given["nemesis"] = cell.nemesis.kinds
    if cell.nemesis.interval_s is not None:
        given["nemesis_interval_s"] = float(cell.nemesis.interval_s)
    if backend:
        given["backend"] = backend
    given.update(seed=cell.seed, store=store, test_name=f"nightly-{cell.name}")
    given["nemesis"] = tuple(given.get("nemesis") or ())
    return RunOptions(**given)


def resolve_cells(
    matrix: Matrix, store: Path, backend: str | None = None, analyze: bool = True
) -> dict[str, ResolvedRun]:
    """Every cell's run resolved (harness.resolved_run), by cell name, before the first runs.
    `analyze=False` leaves the judging to `run_nightly(..., judge_together_after=True)`."""
    runs = {}
    for cell in matrix.cells():
        opts = cell_options(cell, store, backend)
        runs[cell.name] = resolve_run(opts if analyze else replace(opts, no_analyze=True))
    return runs


def harness_runner(runs: Mapping[str, ResolvedRun]) -> Runner:
    """The real runner: each cell's run, as resolved before the night, through
    harness.run.run_test (its store is the one it was resolved with)."""

    def run_cell(cell: NightlyCell, store: Path) -> RunOutcomeLike:
        return run_test(runs[cell.name])

    return run_cell


def judge_together(
    outcomes: Sequence[CellOutcome], spark_master: str
) -> tuple[list[CellOutcome], str | None]:
    """Every cell that ran to its end but was not analyzed, judged in one Spark application
    (one JVM start for the night, not one a cell), then its report; a cell's exit code
    becomes its verdict's. Cells that crashed or ended unknown keep what they had.

    A crash of the checker costs the night only the verdicts it took: `analyze_runs` writes
    the results.json of every run it judged before it raises, so after a crash each cell's
    verdict is read from there, and a cell left without one exits 255, its error the crash.
    The crash is returned, for the summary."""
    waiting = [
        o
        for o in outcomes
        if o.run_dir and o.exit_code == 0 and not (Path(o.run_dir) / RESULTS).exists()
    ]
    if not waiting:
        return list(outcomes), None
    # imported here: pyspark and matplotlib load only for a night that has runs to judge
    from checker.analyze import analyze_runs, exit_code
    from reports.render import render_report

    run_dirs = [Path(str(o.run_dir)) for o in waiting]
    crash: str | None = None
    try:
        found: list[dict[str, Any] | None] = list(analyze_runs(run_dirs, spark_master=spark_master))
    except Exception as e:  # a bug of the checker: the summary is still written, and shows it
        log.exception("the checker crashed judging the night's runs")
        crash = "".join(traceback.format_exception_only(e)).strip()
        found = [read_json(d / RESULTS) for d in run_dirs]
    judged: dict[str, CellOutcome] = {}
    for outcome, run_dir, results in zip(waiting, run_dirs, found, strict=True):
        if not isinstance(results, dict):
            error = f"the checker crashed and left no results.json: {crash}"
            judged[str(outcome.run_dir)] = replace(outcome, exit_code=EXIT_CRASH, error=error)
            continue
        judged[str(outcome.run_dir)] = replace(outcome, exit_code=exit_code(results))
        try:
            render_report(run_dir)
        except Exception as e:  # a report that fails must not lose the night's verdicts
            log.error("report of %s failed: %s", run_dir, e)
    return [judged.get(str(o.run_dir), o) for o in outcomes], crash


def run_cells(cells: Sequence[NightlyCell], store: Path, runner: Runner) -> list[CellOutcome]:
    outcomes = []
    for cell in cells:
        started = time.monotonic()
        run_dir: str | None = None
        code: int | None = None
        error: str | None = None
        expect = cell.scenario.expect
        allow: tuple[str, ...] = ()
        try:
            got = runner(cell, store)
            run_dir, code = str(Path(got.run_dir).resolve()), int(got.exit_code)
            expect, allow = _run_expect(Path(run_dir), expect)
        except Exception as exc:  # a crashed cell must not stop the night
            error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
        outcomes.append(
            CellOutcome(
                cell=cell.name,
                scenario=cell.scenario.name,
                nemesis=cell.nemesis.name,
                seed=cell.seed,
                expect=expect,
                run_dir=run_dir,
                exit_code=code,
                error=error,
                seconds=round(time.monotonic() - started, 3),
                allow=allow,
            )
        )
    return outcomes


def _run_expect(
    run_dir: Path, matrix_expect: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What the run was held to: run.json's `expect` (the matrix's, else its scenario file's,
    as the harness wrote it) and `allow`, so the night judges as the run's own report and
    junit.xml do; the matrix's `expect` when run.json has no such field."""
    run = read_json(run_dir / RUN_JSON)
    if isinstance(run, dict) and "expect" in run:
        return expect_of(run), allow_of(run)
    return matrix_expect, allow_of(run if isinstance(run, dict) else None)


def run_nightly(
    matrix: Matrix | Path,
    store: Path = Path("store"),
    runner: Runner | None = None,
    backend: str | None = None,
    spark_master: str = "local[2]",
    *,
    judge_together_after: bool = False,
) -> NightlyResult:
    """Run every cell of the matrix (read already, or its file) (a crash is recorded, not
    fatal), then summarize with one Spark job. `judge_together_after`: the runner left its
    runs unanalyzed (resolve_cells(analyze=False)); they are judged together in one Spark
    application before the summary."""
    matrix = matrix if isinstance(matrix, Matrix) else load_matrix(Path(matrix))
    store = Path(store)
    night = datetime.now(tz=UTC).strftime("%Y%m%dT%H%M%S")
    out_dir = store / "nightly" / night
    n = 1
    while out_dir.exists():
        n += 1
        out_dir = store / "nightly" / f"{night}-{n}"
    out_dir.mkdir(parents=True)
    runner = runner or harness_runner(resolve_cells(matrix, store, backend))
    outcomes = run_cells(matrix.cells(), store, runner)
    crash = None
    if judge_together_after:
        outcomes, crash = judge_together(outcomes, spark_master)
    code, summary = write_summary(out_dir, outcomes, spark_master, checker_crash=crash)
    return NightlyResult(code, out_dir, tuple(outcomes), summary)
