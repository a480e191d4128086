"""The catalog model: DDL application and validation, index states, the version history and its
floor lookup, the catalog.jsonl form; plus partitioning and the index state machine's pure part."""

from __future__ import annotations

import itertools
import json
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemasync import index_states as ix
from schemasync.catalog import (
    AVAILABLE,
    BUILDING,
    REGISTERED,
    STOPPING,
    Catalog,
    CatalogHistory,
    activation_ts_of,
    apply_ddl,
    next_catalog,
)
from schemasync.ddl import DdlInvalid, parse_ddl
from schemasync.partitioning import partition_of, primaries, primary_of

DD = 500
SKIP = frozenset({"skip-index-states"})


def build(*stmts: str, toggles: frozenset[str] = frozenset()) -> CatalogHistory:
    history = CatalogHistory()
    safe = 1_000 << 16
    for stmt in stmts:
        safe += 7 << 16
        history.append(next_catalog(history.latest(), parse_ddl(stmt), stmt, safe, DD, toggles))
    return history


def latest(*stmts: str, toggles: frozenset[str] = frozenset()) -> Catalog:
    return build(*stmts, toggles=toggles).latest()


BASE = "CREATE TABLE t (a INT32, b VARCHAR(4) DEFAULT 'x', c DECIMAL(5,2) NOT NULL DEFAULT 1)"


def test_version_one_is_empty() -> None:
    cat = CatalogHistory().latest()
    assert (cat.version, cat.activation_ts, dict(cat.tables)) == (1, 0, {})
    assert cat.to_json()["tables"] == {}


def test_create_table_json_line() -> None:
    cat = latest(BASE)
    line = cat.to_json()
    assert line["catalog_version"] == 2
    assert line["safe_ts"] == 1_007 << 16
    assert line["activation_ts"] == activation_ts_of(1_007 << 16, DD) == (1_507 << 16)
    assert line["delay_ms"] == DD
    assert line["ddl"] == BASE
    table = line["tables"]["t"]
    assert table["schema_version"] == 1
    assert table["columns"] == [
        {"id": 1, "name": "a", "type": "INT32", "nullable": True, "default": None},
        {"id": 2, "name": "b", "type": "VARCHAR(4)", "nullable": True, "default": "x"},
        {"id": 3, "name": "c", "type": "DECIMAL(5,2)", "nullable": False, "default": "1.00"},
    ]
    assert table["indexes"] == []
    assert table["id"] == 4
    assert json.loads(json.dumps(line)) == line


def test_every_ddl_bumps_only_its_table() -> None:
    h = build(
        BASE,
        "CREATE TABLE u (x INT64)",
        "ALTER TABLE t ADD COLUMN d BOOLEAN",
        "ALTER TABLE t RENAME COLUMN a TO a2",
        "ALTER TABLE t ALTER COLUMN a2 SET DATA TYPE INT64",
        "ALTER TABLE t ALTER COLUMN b DROP DEFAULT",
        "ALTER TABLE t ALTER COLUMN b SET DEFAULT 'y'",
        "ALTER TABLE t ALTER COLUMN c DROP NOT NULL",
        "ALTER TABLE t ALTER COLUMN c SET NOT NULL",
        "CREATE INDEX i ON t (a2)",
        "ALTER TABLE t DROP COLUMN d",
        "ALTER TABLE t RENAME TO t2",
    )
    t2 = h.latest().table("t2")
    assert t2 is not None and h.latest().table("t") is None
    assert t2.schema_version == 11  # one bump per DDL on t
    assert h.latest().table("u").schema_version == 1  # type: ignore[union-attr]
    assert [c.name for c in t2.columns] == ["a2", "b", "c"]
    assert [c.id for c in t2.columns] == [1, 2, 3]
    a2 = t2.column("a2")
    assert a2 is not None and a2.type == "INT64"
    assert t2.index("i") is not None and t2.index("i").columns == ("a2",)  # type: ignore[union-attr]
    assert h.table_versions(t2.id)[11] == t2
    assert sorted(h.table_versions(t2.id)) == list(range(1, 12))


def test_drop_and_readd_column_gets_a_new_id() -> None:
    cat = latest(BASE, "ALTER TABLE t DROP COLUMN a", "ALTER TABLE t ADD COLUMN a INT32")
    t = cat.table("t")
    assert t is not None
    assert [(c.name, c.id) for c in t.columns] == [("b", 2), ("c", 3), ("a", 5)]


def test_drop_table_then_recreate_is_another_table() -> None:
    h = build(BASE, "DROP TABLE t", BASE)
    assert h.at_version(3).table("t") is None
    old, new = h.at_version(2).table("t"), h.latest().table("t")
    assert old is not None and new is not None and old.id != new.id
    assert new.schema_version == 1
    assert h.latest().table_by_id(new.id) == new and h.latest().table_by_id(old.id) is None


def test_alter_type_widens_the_default() -> None:
    cat = latest(
        "CREATE TABLE t (a INT32 DEFAULT 7, f FLOAT DEFAULT 2)",
        "ALTER TABLE t ALTER COLUMN a SET DATA TYPE VARCHAR(11)",
        "ALTER TABLE t ALTER COLUMN f SET DATA TYPE DOUBLE",
    )
    t = cat.table("t")
    assert t is not None
    assert t.column("a").default == "7"  # type: ignore[union-attr]
    assert t.column("f").default == 2.0  # type: ignore[union-attr]


INVALID = [
    ("DROP TABLE nope", "does not exist"),
    ("ALTER TABLE nope ADD COLUMN z INT32", "does not exist"),
    (BASE, "already exists"),
    ("CREATE TABLE u (a INT32, a INT64)", "duplicate column"),
    ("CREATE TABLE u (key INT32)", "reserved"),
    ("CREATE TABLE u (a INT32 NOT NULL DEFAULT NULL)", "cannot be NULL"),
    ("CREATE TABLE u (a INT32 DEFAULT 'x')", "default"),
    ("ALTER TABLE t RENAME TO other", "exists"),
    ("ALTER TABLE t RENAME TO t", "exists"),
    ("ALTER TABLE t ADD COLUMN a INT64", "already exists"),
    ("ALTER TABLE t ADD COLUMN z INT32 NOT NULL", "without a default"),
    ("ALTER TABLE t ADD COLUMN z VARCHAR(1) DEFAULT 'long'", "default"),
    ("ALTER TABLE other DROP COLUMN o", "last column"),
    ("ALTER TABLE t DROP COLUMN zz", "does not exist"),
    ("ALTER TABLE t DROP COLUMN a", "index ia uses it"),
    ("ALTER TABLE t RENAME COLUMN a TO b", "already exists"),
    ("ALTER TABLE t RENAME COLUMN a TO KEY", "reserved"),
    ("ALTER TABLE t RENAME COLUMN zz TO yy", "does not exist"),
    ("ALTER TABLE t ALTER COLUMN a SET DATA TYPE INT32", "already has type"),
    ("ALTER TABLE t ALTER COLUMN b SET DATA TYPE VARCHAR(2)", "not a widening"),
    ("ALTER TABLE t ALTER COLUMN a SET DATA TYPE DOUBLE", "not a widening"),
    ("ALTER TABLE t ALTER COLUMN c SET DATA TYPE DECIMAL(6,3)", "not a widening"),
    ("ALTER TABLE t ALTER COLUMN c SET NOT NULL", "already NOT NULL"),
    ("ALTER TABLE t ALTER COLUMN a SET NOT NULL", "no default"),
    ("ALTER TABLE t ALTER COLUMN a DROP NOT NULL", "already nullable"),
    ("ALTER TABLE t ALTER COLUMN a DROP DEFAULT", "no default"),
    ("ALTER TABLE t ALTER COLUMN b SET DEFAULT 'x'", "already has default"),
    ("ALTER TABLE t ALTER COLUMN c SET DEFAULT NULL", "cannot be NULL"),
    ("ALTER TABLE t ALTER COLUMN a SET DEFAULT 'x'", "default"),
    ("CREATE INDEX ia ON other (o)", "already exists"),
    ("CREATE INDEX j ON t (zz)", "does not exist"),
    ("CREATE INDEX j ON t (a, a)", "twice"),
    ("CREATE INDEX j ON nope (a)", "does not exist"),
    ("DROP INDEX nope", "does not exist"),
    ("ALTER INDEX ia SET STATE AVAILABLE", "cannot move"),
    ("ALTER INDEX ia SET STATE STOPPING", "cannot move"),
    ("ALTER INDEX ia REMOVE", "cannot move"),
]


@pytest.mark.parametrize(("stmt", "why"), INVALID)
def test_invalid_ddl(stmt: str, why: str) -> None:
    cat = latest(BASE, "CREATE TABLE other (o INT32)", "CREATE INDEX ia ON t (a)")
    with pytest.raises(DdlInvalid) as info:
        apply_ddl(cat, parse_ddl(stmt), frozenset())
    assert why in info.value.message
    assert info.value.code == "DDL_INVALID"


def test_index_lifecycle() -> None:
    states = []
    h = build(BASE)
    for stmt in (
        "CREATE INDEX i ON t (a, b)",
        "ALTER INDEX i SET STATE BUILDING",
        "ALTER INDEX i SET STATE AVAILABLE",
        "DROP INDEX i",
        "ALTER INDEX i REMOVE",
    ):
        cat = h.latest()
        h.append(next_catalog(cat, parse_ddl(stmt), stmt, cat.safe_ts + (1 << 16), DD))
        found = h.latest().index("i")
        states.append(found[1].state if found else None)
    assert states == [REGISTERED, BUILDING, AVAILABLE, STOPPING, None]
    assert h.latest().table("t").schema_version == 6  # type: ignore[union-attr]
    with pytest.raises(DdlInvalid):
        apply_ddl(h.at_version(6), parse_ddl("DROP INDEX i"), frozenset())  # already STOPPING


def test_drop_of_an_unavailable_index_removes_it() -> None:
    for extra in ((), ("ALTER INDEX i SET STATE BUILDING",)):
        cat = latest(BASE, "CREATE INDEX i ON t (a)", *extra, "DROP INDEX i")
        assert cat.index("i") is None


def test_skip_index_states_toggle() -> None:
    cat = latest(BASE, "CREATE INDEX i ON t (a)", toggles=SKIP)
    assert cat.index("i")[1].state == AVAILABLE  # type: ignore[index]
    cat = latest(BASE, "CREATE INDEX i ON t (a)", "DROP INDEX i", toggles=SKIP)
    assert cat.index("i") is None


def test_rename_column_renames_index_columns_and_drop_table_drops_indexes() -> None:
    cat = latest(BASE, "CREATE INDEX i ON t (b, a)", "ALTER TABLE t RENAME COLUMN a TO z")
    assert cat.index("i")[1].columns == ("b", "z")  # type: ignore[index]
    cat = latest(BASE, "CREATE INDEX i ON t (a)", "DROP TABLE t", "CREATE TABLE u (a INT32)")
    assert cat.index("i") is None
    apply_ddl(cat, parse_ddl("CREATE INDEX i ON u (a)"), frozenset())


def test_history_append_rules() -> None:
    h = build(BASE)
    cat = h.latest()
    h.append(cat)  # re-applying the latest unchanged is a no-op
    assert len(h) == 2
    stmt = "DROP TABLE t"
    for safe in (cat.safe_ts, cat.safe_ts - 1):
        earlier = next_catalog(cat, parse_ddl(stmt), stmt, safe, DD)
        with pytest.raises(ValueError, match="activates"):
            h.append(earlier)
    gap = next_catalog(cat, parse_ddl(stmt), stmt, cat.safe_ts + 1, DD)
    with pytest.raises(ValueError, match="gap-free"):
        h.append(Catalog(4, gap.activation_ts, gap.safe_ts, DD, stmt, gap.tables, gap.next_id))


def test_unordered_activation_files_versions_by_their_own_ts() -> None:
    """mutable-delay: a version may activate before the previous one; lookup follows ts."""
    h = CatalogHistory(ordered_activation=False)
    c2 = next_catalog(h.latest(), parse_ddl(BASE), BASE, 100 << 16, 1000)
    h.append(c2)
    c3 = next_catalog(c2, parse_ddl("DROP TABLE t"), "DROP TABLE t", 200 << 16, 10)
    h.append(c3)
    assert c3.activation_ts < c2.activation_ts
    assert h.active(c3.activation_ts).version == 3
    assert h.active(c2.activation_ts).version == 2
    assert [c.version for c in h.versions_between(c2.activation_ts, c2.activation_ts + 1)] == [2]


# ---- property tests: random DDL sequences ------------------------------------------------------

TYPES = ["INT32", "INT64", "FLOAT", "DOUBLE", "DECIMAL(5,2)", "VARCHAR(8)", "BOOLEAN"]
TABLES = ["t0", "t1", "t2"]
COLUMNS = ["c0", "c1", "c2", "c3"]
INDEXES = ["i0", "i1"]
STMT_TEMPLATES = [
    "CREATE TABLE {t} (c0 {ty}, c1 INT32 DEFAULT 1, c2 VARCHAR(4))",
    "CREATE TABLE {t} (c0 INT32, c1 {ty})",
    "DROP TABLE {t}",
    "ALTER TABLE {t} RENAME TO {t2}",
    "ALTER TABLE {t} ADD COLUMN {c} {ty}",
    "ALTER TABLE {t} ADD COLUMN {c} INT64 NOT NULL DEFAULT 5",
    "ALTER TABLE {t} DROP COLUMN {c}",
    "ALTER TABLE {t} RENAME COLUMN {c} TO {c2}",
    "ALTER TABLE {t} ALTER COLUMN {c} SET DATA TYPE {ty}",
    "ALTER TABLE {t} ALTER COLUMN {c} SET NOT NULL",
    "ALTER TABLE {t} ALTER COLUMN {c} DROP NOT NULL",
    "ALTER TABLE {t} ALTER COLUMN {c} SET DEFAULT 3",
    "ALTER TABLE {t} ALTER COLUMN {c} DROP DEFAULT",
    "CREATE INDEX {i} ON {t} ({c})",
    "DROP INDEX {i}",
    "ALTER INDEX {i} SET STATE BUILDING",
    "ALTER INDEX {i} SET STATE AVAILABLE",
    "ALTER INDEX {i} REMOVE",
]


@st.composite
def ddl_runs(draw: st.DrawFn) -> tuple[list[str], list[int]]:
    """Statements (some of which will not apply) and strictly increasing safe_ts gaps."""
    n = draw(st.integers(5, 60))
    stmts = [f"CREATE TABLE {t} (c0 INT32, c1 DOUBLE NOT NULL)" for t in TABLES[: n % 3]]
    for _ in range(n - len(stmts)):
        template = draw(st.sampled_from(STMT_TEMPLATES))
        stmts.append(
            template.format(
                t=draw(st.sampled_from(TABLES)),
                t2=draw(st.sampled_from(TABLES)),
                c=draw(st.sampled_from(COLUMNS)),
                c2=draw(st.sampled_from(COLUMNS)),
                ty=draw(st.sampled_from(TYPES)),
                i=draw(st.sampled_from(INDEXES)),
            )
        )
    gaps = draw(st.lists(st.integers(1, 3 << 16), min_size=n, max_size=n))
    return stmts, gaps


def run_history(stmts: list[str], gaps: list[int], toggles: frozenset[str]) -> CatalogHistory:
    h = CatalogHistory()
    safe = 1 << 16
    for stmt, gap in zip(stmts, gaps, strict=True):
        safe += gap
        try:
            cat = next_catalog(h.latest(), parse_ddl(stmt), stmt, safe, DD, toggles)
        except DdlInvalid:
            continue
        h.append(cat)
    return h


@settings(max_examples=80, deadline=None)
@given(run=ddl_runs(), probes=st.lists(st.integers(0, 200 << 16), max_size=20), skip=st.booleans())
def test_history_properties(
    run: tuple[list[str], list[int]], probes: list[int], skip: bool
) -> None:
    h = run_history(*run, toggles=SKIP if skip else frozenset())
    cats = list(h)
    # versions gap-free from 1, activation strictly increasing
    assert [c.version for c in cats] == list(range(1, len(cats) + 1))
    assert all(a.activation_ts < b.activation_ts for a, b in itertools.pairwise(cats))
    # active() is the floor lookup
    for ts in [*probes, *(c.activation_ts + k for c in cats for k in (-1, 0, 1))]:
        if ts < 0:
            continue
        expected = max((c for c in cats if c.activation_ts <= ts), key=lambda c: c.activation_ts)
        assert h.active(ts) == expected
    for a, b in itertools.pairwise(probes):
        lo, hi = min(a, b), max(a, b)
        between = [c.version for c in h.versions_between(lo, hi)]
        assert between == list(range(h.active(lo).version, h.active(hi).version + 1))
    # JSON round trip, every version
    for c in cats:
        line = json.loads(json.dumps(c.to_json()))
        assert Catalog.from_json(line) == c
        assert Catalog.from_json(line).to_json() == c.to_json()
    # per-table schema versions: +1 exactly when the table changed; ids unique; invariants
    for prev, cur in itertools.pairwise(cats):
        for t in cur.tables.values():
            before = prev.table_by_id(t.id)
            if before is None:
                assert t.schema_version == 1
            elif before == t:
                assert t.schema_version == before.schema_version
            else:
                assert t.schema_version == before.schema_version + 1
    for c in cats:
        ids = []
        for t in c.tables.values():
            assert t.columns, "a table always keeps a column"
            ids += [t.id, *(col.id for col in t.columns), *(i.id for i in t.indexes)]
            names = {col.name for col in t.columns}
            assert len(names) == len(t.columns)
            for i in t.indexes:
                assert set(i.columns) <= names
                if skip:
                    assert i.state == AVAILABLE
        assert len(ids) == len(set(ids))
        assert all(x < c.next_id for x in ids)


# ---- index state machine (pure part) -------------------------------------------------------


def test_next_statement_drives_an_index_to_rest() -> None:
    h = build(BASE, "CREATE INDEX i ON t (a)")
    seen = []
    while steps := ix.pending_steps(h.latest()):
        (step,) = steps
        seen.append(step.from_state)
        cat = h.latest()
        h.append(next_catalog(cat, parse_ddl(step.stmt), step.stmt, cat.safe_ts + 1, DD))
    assert seen == [REGISTERED, BUILDING]
    assert h.latest().index("i")[1].state == AVAILABLE  # type: ignore[index]
    cat = h.latest()
    h.append(next_catalog(cat, parse_ddl("DROP INDEX i"), "DROP INDEX i", cat.safe_ts + 1, DD))
    (step,) = ix.pending_steps(h.latest())
    assert (step.from_state, step.stmt) == (STOPPING, "ALTER INDEX i REMOVE")


def test_state_activation_ts_is_when_the_current_state_began() -> None:
    h = build(
        BASE,
        "CREATE INDEX i ON t (a)",
        "ALTER TABLE t ADD COLUMN z INT32",
        "ALTER INDEX i SET STATE BUILDING",
        "ALTER TABLE t ADD COLUMN y INT32",
        "CREATE TABLE u (a INT32)",
    )
    cats = list(h)
    assert ix.state_activation_ts(cats, "i") == h.at_version(5).activation_ts
    assert ix.state_activation_ts(cats[:4], "i") == h.at_version(3).activation_ts
    assert ix.state_activation_ts(cats, "nope") is None
    # a dropped and re-created index of the same name starts again
    h2 = build(BASE, "CREATE INDEX i ON t (a)", "DROP INDEX i", "CREATE INDEX i ON t (b)")
    assert ix.state_activation_ts(list(h2), "i") == h2.at_version(5).activation_ts


def test_may_advance_gate() -> None:
    act = 1_000
    assert ix.may_advance(act, [])
    assert ix.may_advance(act, [act, act + 5])
    assert not ix.may_advance(act, [act + 5, act - 1])


def test_maintained_and_readable() -> None:
    cat = latest(BASE, "CREATE INDEX i ON t (a)")
    index = cat.index("i")[1]  # type: ignore[index]
    assert ix.maintained(index) and not ix.readable(index)
    assert ix.readable(type(index)(index.id, "i", ("a",), AVAILABLE))
    assert ix.maintained(type(index)(index.id, "i", ("a",), STOPPING))


# ---- partitioning ----------------------------------------------------------------------------


def test_partition_of_matches_the_interface_formula() -> None:
    for key in (0, 1, -1, 2**63 - 1, -(2**63), 123456789):
        expected = zlib.crc32(key.to_bytes(8, "big", signed=True)) % 4
        assert partition_of(key, 4) == expected
    counts = [0] * 4
    for key in range(4000):
        counts[partition_of(key, 4)] += 1
    assert min(counts) > 800  # spread over every partition
    with pytest.raises(ValueError):
        partition_of(1, 0)


def test_primary_of_is_deterministic_over_sorted_names() -> None:
    nodes = ["n3", "n1", "n2"]
    assert primary_of(1, 0, nodes) == "n2"
    assert primary_of(1, 1, nodes) == "n3"
    assert primary_of(1, 2, nodes) == "n1"
    assert primaries(4, 3, nodes) == {0: "n2", 1: "n3", 2: "n1"}
    with pytest.raises(ValueError):
        primary_of(1, 0, [])


def test_from_json_of_a_foreign_line_without_extra_fields() -> None:
    """Only history.md's required fields: no `name`, `next_id` or index ids."""
    line = latest(BASE, "CREATE INDEX i ON t (a)", "CREATE INDEX j ON t (b)").to_json()
    del line["next_id"]
    for t in line["tables"].values():
        del t["name"]
        for i in t["indexes"]:
            del i["id"]
    cat = Catalog.from_json(line)
    t = cat.table("t")
    assert t is not None and t.name == "t"
    assert cat.next_id == 5  # ids 1..4 are the columns and the table
    ids = [i.id for i in t.indexes]
    assert len(set(ids)) == 2 and all(x < 0 for x in ids)
    assert Catalog.from_json(line).index("j") == cat.index("j")
