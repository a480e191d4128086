"""Whether a history is complete (history.md, "A complete history"), and what is missing if not.

A run may be called valid only when every invoke has its completion, every fault that started
was healed, and the final reads cover every written table and every index AVAILABLE at the end.
Anything less means the controller died or the final phase failed: the verdict is then unknown,
and each error here says what is missing precisely enough to act on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checker.contract import value_or_none
from checker.facts import LastWrite
from checker.frames import RunFrames
from checker.ingest import CLIENT_PROCESS

FINAL_READ = "final-read"
# a start-X is closed by stop-X or heal-X (partition heals) or by a heal-all after it
CLOSERS = ("stop-", "heal-")
HEAL_ALL = "heal-all"
EFFECT = "effect"  # fault evidence: a nemesis event that never opens or closes a fault


@dataclass(frozen=True)
class Completeness:
    """What a history lacks: `errors` for results.json, `undecided_tables` whose lost-write and
    index classes cannot be judged (no ok final read)."""

    errors: tuple[str, ...]
    undecided_tables: frozenset[str]


def check_completeness(
    frames: RunFrames,
    run: int,
    last_line: Mapping[str, Any] | None,
    lines: Sequence[Mapping],
    clock_free: bool = False,
) -> Completeness:
    """Everything "A complete history" requires of run `run` of `frames` (whose last catalog
    line and catalog lines are given), each missing part as one sentence."""
    errors: list[str] = []
    facts = frames.known(run)
    open_invokes = _open_invokes(frames, run)
    if open_invokes:
        errors.append(open_invokes)
    errors.extend(unhealed_faults(facts.nemesis))
    errors.extend(ineffective_faults(facts.nemesis))
    written = _written_tables(frames, run, last_line, lines)
    reads = facts.final_reads
    missing, undecided = missing_final_reads(written, reads, last_line, lines)
    errors.extend(missing)
    early, early_tables = early_final_reads(facts.last_writes, reads, last_line, lines, clock_free)
    errors.extend(early)
    undecided |= early_tables
    return Completeness(tuple(errors), frozenset(undecided))


def _open_invokes(frames: RunFrames, run: int) -> str | None:
    """'N invokes without a completion, the last at index I', or None.

    Each paired completion closes exactly the invoke just before it in its process, so the
    invokes without one are counted by subtraction; only a history that has some pays for the
    join that finds the last of them."""
    facts = frames.known(run)
    n_invokes, n_closed = facts.invokes, facts.closed
    if n_invokes <= n_closed:
        return None
    events = frames.events.where(F.col("run") == run)
    client = events.where(F.col("process").rlike(CLIENT_PROCESS))
    invokes = client.where(F.col("type") == "invoke")
    closed = frames.completions.where(F.col("run") == run).select(
        F.col("run").alias("_cr"), F.col("invoke_index").alias("_ci")
    )
    row = (
        invokes.join(
            closed, (F.col("run") == F.col("_cr")) & (F.col("index") == F.col("_ci")), "left_anti"
        )
        .agg(F.count(F.lit(1)).alias("n"), F.max("index").alias("last"))
        .first()
    )
    n = int(row["n"]) if row is not None else n_invokes - n_closed
    last = row["last"] if row is not None else None
    where = f", the last at index {last}" if last is not None else ""
    noun = "invoke" if n == 1 else "invokes"
    return (
        f"history.jsonl: {n} {noun} without a completion{where} (the run was cut short or "
        "the controller died)"
    )


def unhealed_faults(events: Iterable[Any]) -> list[str]:
    """A sentence per nemesis start-X that no stop-X/heal-X closed and no heal-all followed.

    A closer carrying a `fault` id (in its value, as our nemesis writes it) closes the start
    with that id, so one kind may overlap itself; any other closes the earliest open start of
    its kind, as does one whose id matches no open start."""
    open_: dict[str, list[tuple[int, Any]]] = {}
    for e in sorted(events, key=lambda e: int(e["index"])):
        f = str(e["f"])
        if f == HEAL_ALL:
            open_.clear()
        elif f.startswith("start-"):
            open_.setdefault(f.removeprefix("start-"), []).append((int(e["index"]), _fault(e)))
        else:
            for prefix in CLOSERS:
                stack = open_.get(f.removeprefix(prefix)) if f.startswith(prefix) else None
                if stack:
                    fault = _fault(e)
                    same = [s for s in stack if fault is not None and s[1] == fault]
                    stack.remove(same[0] if same else stack[0])
                    break
    return [
        f"history.jsonl: fault start-{kind} at index {index} was never healed (no stop-{kind} "
        f"or heal-{kind} closed it, and no {HEAL_ALL} came after it)"
        for kind, starts in sorted(open_.items())
        for index, _ in starts
    ]


def ineffective_faults(events: Iterable[Any]) -> list[str]:
    """A sentence per fault evidence event that says `"effective": false` (history.md, "Fault
    evidence"): the run did not test what it claims. Only a JSON `false` counts; evidence of
    any other shape says nothing either way."""
    out = []
    for e in sorted(events, key=lambda e: int(e["index"])):
        value = value_or_none(e.get("value_json")) if str(e["f"]) == EFFECT else None
        if not isinstance(value, dict) or value.get("effective") is not False:
            continue
        start = value.get("start_index")
        node = value.get("node")
        evidence = json.dumps(value.get("evidence"), sort_keys=True, default=str)
        out.append(
            f"history.jsonl: fault {value.get('fault')}"
            + (f" started at index {start}" if start is not None else "")
            + f" did not take effect{f' on {node}' if node else ''}"
            + f" (evidence at index {e['index']}: {evidence}): the run did not test what it claims"
        )
    return out


def _fault(event: Mapping[str, Any]) -> Any:
    """The `fault` id in a nemesis event's value, or None."""
    value = value_or_none(event.get("value_json"))
    fault = value.get("fault") if isinstance(value, dict) else None
    return fault if isinstance(fault, (int, str)) else None


def _written_tables(
    frames: RunFrames,
    run: int,
    final_catalog: Mapping[str, Any] | None,
    all_catalogs: Sequence[Mapping],
) -> set[str]:
    """Tables that an ok txn of run `run` wrote and, when they could matter, those a txn of
    unknown outcome (info) meant to write."""
    facts = frames.known(run)
    tables = set(facts.written_ok)
    # The invokes of unknown outcomes are looked up by index, a scan of every event's ops
    # (22 s of a 10^7-event analysis), and only when what they wrote could matter: when the ok
    # writes leave some table of the final catalog not required to be read.
    info = list(facts.info_txn_invokes)
    final_tables = set(((final_catalog or {}).get("tables") or {}).keys())
    if info and required_tables(tables, final_catalog, all_catalogs) != final_tables:
        maybe: DataFrame = (
            frames.events.where((F.col("run") == run) & F.col("index").isin(info))
            .select("run", F.explode("value.ops").alias("o"))
            .where(F.col("o.op").isin("w", "d"))
            .select("run", F.col("o.table").alias("table"))
            .distinct()
        )
        tables |= {str(r["table"]) for r in maybe.collect() if r["table"]}
    return tables


def required_tables(
    written: set[str], final_catalog: Mapping[str, Any] | None, all_catalogs: Sequence[Mapping]
) -> set[str]:
    """The tables of the final catalog whose id some written name ever had (a rename is
    followed; a dropped table is not required)."""
    return set(final_names(written, final_catalog, all_catalogs))


def final_names(
    written: Iterable[str], final_catalog: Mapping[str, Any] | None, all_catalogs: Sequence[Mapping]
) -> dict[str, set[str]]:
    """Each table of the final catalog whose id some written name ever had, with those names."""
    tables = (final_catalog or {}).get("tables") or {}
    name_of_id = {int(t["id"]): name for name, t in tables.items()}
    ids_of_name: dict[str, set[int]] = {}
    for line in all_catalogs:
        for name, t in (line.get("tables") or {}).items():
            ids_of_name.setdefault(name, set()).add(int(t["id"]))
    out: dict[str, set[str]] = {}
    for w in written:
        for i in ids_of_name.get(w, ()):
            if i in name_of_id:
                out.setdefault(name_of_id[i], set()).add(w)
    return out


def early_final_reads(
    last_writes: Sequence[LastWrite],
    reads: Sequence[Mapping[str, Any]],
    final_catalog: Mapping[str, Any] | None,
    all_catalogs: Sequence[Mapping[str, Any]],
    clock_free: bool,
) -> tuple[list[str], set[str]]:
    """Errors for each table whose latest ok final read is not after every acknowledged write
    to it: by timestamp (commit_ts < the read's ts, as lost-write compares them), or on a
    clock-free run by real time (the write completed before the read was invoked). lost-write
    leaves such a write out, so the table is undecided rather than valid."""
    by_name = {w.table: w for w in last_writes}
    latest: dict[str, Mapping[str, Any]] = {}
    for r in reads:  # in index order
        if r["type"] == "ok" and r.get("index_name") is None and r.get("table") is not None:
            latest[str(r["table"])] = r
    errors: list[str] = []
    undecided: set[str] = set()
    for table, names in sorted(final_names(by_name, final_catalog, all_catalogs).items()):
        read = latest.get(table)
        if read is None:
            continue  # missing_final_reads names it
        writes = [by_name[n] for n in names]
        if clock_free:
            last = max(writes, key=lambda w: w.index)
            early = read["invoke_index"] is not None and last.index >= read["invoke_index"]
            when = f"invoked before acknowledged write #{last.index} completed"
        else:
            stamped = [(w.commit_ts, w.commit_index) for w in writes if w.commit_ts is not None]
            if not stamped or read["ts"] is None:
                continue
            commit_ts, index = max(stamped, key=lambda x: x[0])
            early = commit_ts >= read["ts"]
            when = (
                f"at ts {read['ts']}, not after acknowledged write #{index} committed at "
                f"ts {commit_ts}"
            )
        if early:
            undecided.add(table)
            errors.append(
                f"final read of {table} (index {read['index']}) was {when}: history.md asks for "
                f"a final read after every acknowledged write; lost-write of {table} is undecided"
            )
    return errors, undecided


def missing_final_reads(
    written: set[str],
    reads: Sequence[Mapping[str, Any]],
    final_catalog: Mapping[str, Any] | None,
    all_catalogs: Sequence[Mapping[str, Any]],
) -> tuple[list[str], set[str]]:
    """Errors for each written table and each AVAILABLE index with no ok final read.

    A written table is required when the table it named still exists at the end (by id, so a
    rename is followed); a dropped one cannot be read. Returns (errors, undecided tables)."""
    tables = (final_catalog or {}).get("tables") or {}
    required = sorted(required_tables(written, final_catalog, all_catalogs))
    ok_tables = {r["table"] for r in reads if r["type"] == "ok" and r.get("index_name") is None}
    ok_indexes = {
        (r["table"], r["index_name"]) for r in reads if r["type"] == "ok" and r.get("index_name")
    }
    failed: dict[tuple[str, str | None], str] = {}
    for r in reads:
        if r["type"] != "ok" and r.get("table") is not None:
            failed[(r["table"], r.get("index_name"))] = f"{r.get('code')} (index {r['index']})"
    errors: list[str] = []
    undecided: set[str] = set()
    for name in required:
        if name in ok_tables:
            continue
        undecided.add(name)
        why = failed.get((name, None))
        head = f"final read of {name} failed: {why}" if why else f"no final read of {name}"
        errors.append(f"{head}; lost-write and the index classes of {name} are undecided")
    for name, t in sorted(tables.items()):
        for ix in t.get("indexes") or ():
            if ix.get("state") != "AVAILABLE" or (name, ix["name"]) in ok_indexes:
                continue
            undecided.add(name)
            why = failed.get((name, ix["name"]))
            what = f"final read of index {ix['name']} of {name}"
            errors.append(
                f"{what} failed: {why}; the index classes of {name} are undecided"
                if why
                else f"no {what} (AVAILABLE at the end); the index classes of {name} are undecided"
            )
    return errors, undecided
