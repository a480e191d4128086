"""What a DDL statement asks of the table it names, read from its text: the checker's own small
reading of the statements the history contract lists (history.md, `f = ddl`), so that the
ddl-outcome check can say which catalog states allow it.

A reading is conservative: a name the statement does not spell in a form read here is None, and
a condition on it is then left undecided (never an anomaly). Unquoted identifiers compare without
case, as SQL folds them; quoted ones (`"c1"`, `` `c1` ``) exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from checker.sql_types import column_type
from contract.history_shape import DDL_KINDS

_NAME = r'(?:"[^"]+"|`[^`]+`|[A-Za-z_][A-Za-z0-9_$]*)'
_IF_EXISTS = r"(?P<if>IF\s+(?:NOT\s+)?EXISTS\s+)?"
_PATTERNS: dict[str, re.Pattern[str]] = {
    kind: re.compile(pattern, re.IGNORECASE | re.DOTALL)
    for kind, pattern in {
        "add_column": rf"ALTER\s+TABLE\s+{_NAME}\s+ADD\s+(?:COLUMN\s+)?{_IF_EXISTS}"
        rf"(?P<col>{_NAME})(?P<rest>.*)",
        "drop_column": rf"ALTER\s+TABLE\s+{_NAME}\s+DROP\s+(?:COLUMN\s+)?{_IF_EXISTS}"
        rf"(?P<col>{_NAME})\s*(?:CASCADE|RESTRICT)?",
        "rename_column": rf"ALTER\s+TABLE\s+{_NAME}\s+RENAME\s+(?:COLUMN\s+)?"
        rf"(?P<col>{_NAME})\s+TO\s+(?P<new>{_NAME})",
        "alter_column": rf"ALTER\s+TABLE\s+{_NAME}\s+(?:ALTER|MODIFY)\s+(?:COLUMN\s+)?"
        rf"(?P<col>{_NAME})\b.*",
        "rename_table": rf"(?:ALTER\s+TABLE\s+{_NAME}\s+RENAME\s+TO|RENAME\s+TABLE\s+{_NAME}\s+TO)"
        rf"\s+(?P<new>{_NAME})",
        "create_index": rf"CREATE\s+(?:UNIQUE\s+)?INDEX\s+{_IF_EXISTS}(?P<index>{_NAME})\s+ON\s+"
        rf"{_NAME}\s*\((?P<cols>[^)]*)\)",
        "drop_index": rf"DROP\s+INDEX\s+{_IF_EXISTS}(?P<index>{_NAME})(?:\s+ON\s+{_NAME})?",
        "create_table": rf"CREATE\s+TABLE\s+{_IF_EXISTS}{_NAME}\b.*",
        "drop_table": rf"DROP\s+TABLE\s+{_IF_EXISTS}{_NAME}\s*(?:CASCADE|RESTRICT)?",
    }.items()
}
_ALTER_COLUMN_KINDS = ("alter_type", "set_not_null", "drop_not_null", "set_default", "drop_default")
# the contract's DDL kinds this reader follows (every one that names a statement's shape)
KINDS = tuple(k for k in DDL_KINDS if k in _PATTERNS or k in _ALTER_COLUMN_KINDS)


def same_name(a: str, b: str) -> bool:
    """A name as the statement spells it against one in the catalog."""
    if a[:1] in ('"', "`"):
        return a[1:-1] == b
    return a.casefold() == b.casefold()


@dataclass(frozen=True)
class DdlStatement:
    """One statement's reading: its kind, and the names it acts on (None where not read).

    `guarded`: IF [NOT] EXISTS, so the existence of what it names decides nothing.
    `plain_column`: ADD COLUMN's definition is a type the checker knows, with NOT NULL only
    beside a DEFAULT, so no table state can refuse it but one that has the column."""

    kind: str
    column: str | None = None
    new_name: str | None = None
    index: str | None = None
    index_columns: tuple[str, ...] | None = None
    guarded: bool = False
    plain_column: bool = False


def read_statement(kind: str, stmt: str) -> DdlStatement | None:
    """The reading of `stmt` as a DDL of `kind` (the history's own), or None for an unknown kind.
    A statement this reader does not follow keeps only its kind."""
    if kind not in KINDS:
        return None
    key = "alter_column" if kind in _ALTER_COLUMN_KINDS else kind
    m = _PATTERNS[key].fullmatch(stmt.strip().rstrip(";").strip())
    if m is None:
        return DdlStatement(kind)
    groups = m.groupdict()
    cols = groups.get("cols")
    return DdlStatement(
        kind=kind,
        column=groups.get("col"),
        new_name=groups.get("new"),
        index=groups.get("index"),
        index_columns=None if cols is None else tuple(c.strip() for c in cols.split(",")),
        guarded=bool(groups.get("if")),
        plain_column=kind == "add_column" and _plain_definition(groups.get("rest") or ""),
    )


def _plain_definition(rest: str) -> bool:
    """A column definition that every state without the column accepts: a known type, and
    NOT NULL only with a DEFAULT (a NOT NULL column without one is refused on a table that has
    rows)."""
    m = re.fullmatch(
        r"\s*(?P<type>[A-Za-z][A-Za-z0-9]*\s*(?:\(\s*\d+\s*(?:,\s*\d+\s*)?\))?)"
        r"(?P<tail>(?:\s+(?:NOT\s+NULL|NULL|DEFAULT\s+(?:'[^']*'|-?[0-9.]+|TRUE|FALSE|NULL)))*)\s*",
        rest,
        re.IGNORECASE,
    )
    if m is None or column_type(m.group("type")) is None:
        return False
    tail = m.group("tail").upper()
    return "NOT NULL" not in tail or "DEFAULT" in tail
