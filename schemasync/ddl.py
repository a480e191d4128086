"""Parse the DDL statements of docs/interfaces.md into frozen command values.

Parsing is purely syntactic (types are checked and canonicalised, literals keep their lexical
kind); whether a command applies to a catalog is `schemasync.catalog.apply_ddl`'s job. Keywords
are case-insensitive, identifiers keep their case. Every `kind` is the history.md name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from schemasync.errors import DDL_INVALID, SchemaSyncError
from schemasync.types import TypeInvalid, canonical_type

INDEX_TARGET_STATES: tuple[str, ...] = ("BUILDING", "AVAILABLE", "STOPPING")
REMOVED = "REMOVED"


class DdlInvalid(SchemaSyncError):
    """A DDL that does not parse or does not apply to the current catalog (code DDL_INVALID)."""

    def __init__(self, message: str) -> None:
        super().__init__(DDL_INVALID, message, False)


@dataclass(frozen=True)
class Literal:
    """A DDL literal before it meets a column type: kind is int|decimal|string|bool|null|hex."""

    kind: str
    text: str


@dataclass(frozen=True)
class ColumnDef:
    name: str
    type: str  # canonical type string
    not_null: bool = False
    default: Literal | None = None


@dataclass(frozen=True)
class CreateTable:
    kind: ClassVar[str] = "create_table"
    table: str
    columns: tuple[ColumnDef, ...]


@dataclass(frozen=True)
class DropTable:
    kind: ClassVar[str] = "drop_table"
    table: str


@dataclass(frozen=True)
class RenameTable:
    kind: ClassVar[str] = "rename_table"
    table: str
    new_name: str


@dataclass(frozen=True)
class AddColumn:
    kind: ClassVar[str] = "add_column"
    table: str
    column: ColumnDef


@dataclass(frozen=True)
class DropColumn:
    kind: ClassVar[str] = "drop_column"
    table: str
    column: str


@dataclass(frozen=True)
class RenameColumn:
    kind: ClassVar[str] = "rename_column"
    table: str
    column: str
    new_name: str


@dataclass(frozen=True)
class AlterType:
    kind: ClassVar[str] = "alter_type"
    table: str
    column: str
    type: str  # canonical type string


@dataclass(frozen=True)
class SetNotNull:
    kind: ClassVar[str] = "set_not_null"
    table: str
    column: str


@dataclass(frozen=True)
class DropNotNull:
    kind: ClassVar[str] = "drop_not_null"
    table: str
    column: str


@dataclass(frozen=True)
class SetDefault:
    kind: ClassVar[str] = "set_default"
    table: str
    column: str
    default: Literal


@dataclass(frozen=True)
class DropDefault:
    kind: ClassVar[str] = "drop_default"
    table: str
    column: str


@dataclass(frozen=True)
class CreateIndex:
    kind: ClassVar[str] = "create_index"
    index: str
    table: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class DropIndex:
    """DROP INDEX: index names are global, so the statement names no table (`table` is None)."""

    kind: ClassVar[str] = "drop_index"
    index: str
    table: None = None


@dataclass(frozen=True)
class IndexState:
    """Internal `ALTER INDEX i SET STATE s` / `ALTER INDEX i REMOVE` (state REMOVED)."""

    kind: ClassVar[str] = "index_state"
    index: str
    state: str
    table: None = None


DdlCommand = (
    CreateTable
    | DropTable
    | RenameTable
    | AddColumn
    | DropColumn
    | RenameColumn
    | AlterType
    | SetNotNull
    | DropNotNull
    | SetDefault
    | DropDefault
    | CreateIndex
    | DropIndex
    | IndexState
)

COLUMN_KINDS: frozenset[str] = frozenset(
    {
        "add_column",
        "drop_column",
        "rename_column",
        "alter_type",
        "set_not_null",
        "drop_not_null",
        "set_default",
        "drop_default",
    }
)

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<hex>[xX]'[^']*')
  | (?P<string>'(?:[^']|'')*')
  | (?P<number>[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>[(),;])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Token:
    kind: str  # ident, number, string, hex, punct, end
    text: str
    pos: int


def _tokenize(stmt: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(stmt):
        m = _TOKEN_RE.match(stmt, pos)
        if m is None:
            raise DdlInvalid(f"unexpected character {stmt[pos]!r} at {pos}")
        kind = m.lastgroup
        assert kind is not None
        if kind != "ws":
            tokens.append(_Token(kind, m.group(), pos))
        pos = m.end()
    while tokens and tokens[-1].text == ";":
        tokens.pop()
    tokens.append(_Token("end", "", len(stmt)))
    return tokens


class _Parser:
    def __init__(self, stmt: str) -> None:
        self.tokens = _tokenize(stmt)
        self.i = 0

    def peek(self, offset: int = 0) -> _Token:
        return self.tokens[min(self.i + offset, len(self.tokens) - 1)]

    def next(self) -> _Token:
        tok = self.peek()
        self.i = min(self.i + 1, len(self.tokens) - 1)
        return tok

    def at_keyword(self, *words: str) -> bool:
        return all(
            self.peek(k).kind == "ident" and self.peek(k).text.upper() == w
            for k, w in enumerate(words)
        )

    def keyword(self, *words: str) -> None:
        for w in words:
            tok = self.next()
            if tok.kind != "ident" or tok.text.upper() != w:
                raise DdlInvalid(f"expected {w} at {tok.pos}, got {tok.text or 'end'!r}")

    def punct(self, p: str) -> None:
        tok = self.next()
        if tok.text != p:
            raise DdlInvalid(f"expected {p!r} at {tok.pos}, got {tok.text or 'end'!r}")

    def ident(self, what: str) -> str:
        tok = self.next()
        if tok.kind != "ident":
            raise DdlInvalid(f"expected {what} name at {tok.pos}, got {tok.text or 'end'!r}")
        return tok.text

    def end(self) -> None:
        tok = self.peek()
        if tok.kind != "end":
            raise DdlInvalid(f"unexpected {tok.text!r} at {tok.pos}")

    def type_(self) -> str:
        tok = self.next()
        if tok.kind != "ident":
            raise DdlInvalid(f"expected a type at {tok.pos}, got {tok.text or 'end'!r}")
        text = tok.text
        if self.peek().text == "(":
            self.next()
            args = [self.number_arg()]
            while self.peek().text == ",":
                self.next()
                args.append(self.number_arg())
            self.punct(")")
            text += "(" + ",".join(args) + ")"
        try:
            return canonical_type(text)
        except TypeInvalid as e:
            raise DdlInvalid(str(e)) from e

    def number_arg(self) -> str:
        tok = self.next()
        if tok.kind != "number" or not tok.text.isdigit():
            raise DdlInvalid(f"expected a type parameter at {tok.pos}, got {tok.text or 'end'!r}")
        return tok.text

    def literal(self) -> Literal:
        tok = self.next()
        if tok.kind == "number":
            is_int = re.fullmatch(r"[-+]?\d+", tok.text) is not None
            return Literal("int" if is_int else "decimal", tok.text)
        if tok.kind == "string":
            return Literal("string", tok.text[1:-1].replace("''", "'"))
        if tok.kind == "hex":
            body = tok.text[2:-1]
            if re.fullmatch(r"(?:[0-9a-fA-F]{2})*", body) is None:
                raise DdlInvalid(f"bad hex literal {tok.text} at {tok.pos}")
            return Literal("hex", body.lower())
        if tok.kind == "ident" and tok.text.upper() in ("TRUE", "FALSE"):
            return Literal("bool", tok.text.upper())
        if tok.kind == "ident" and tok.text.upper() == "NULL":
            return Literal("null", "NULL")
        raise DdlInvalid(f"expected a literal at {tok.pos}, got {tok.text or 'end'!r}")

    def column_def(self) -> ColumnDef:
        name = self.ident("column")
        type_ = self.type_()
        not_null = False
        default: Literal | None = None
        seen: set[str] = set()
        while True:
            if self.at_keyword("NOT", "NULL"):
                clause = "NOT NULL"
                self.keyword("NOT", "NULL")
                not_null = True
            elif self.at_keyword("NULL"):
                clause = "NULL"
                self.keyword("NULL")
            elif self.at_keyword("DEFAULT"):
                clause = "DEFAULT"
                self.keyword("DEFAULT")
                default = self.literal()
            else:
                break
            if clause in seen or {"NULL", "NOT NULL"} <= seen | {clause}:
                raise DdlInvalid(f"conflicting or repeated {clause} for column {name}")
            seen.add(clause)
        return ColumnDef(name, type_, not_null, default)

    def name_list(self, what: str) -> tuple[str, ...]:
        self.punct("(")
        names = [self.ident(what)]
        while self.peek().text == ",":
            self.next()
            names.append(self.ident(what))
        self.punct(")")
        return tuple(names)

    def statement(self) -> DdlCommand:
        if self.at_keyword("CREATE", "TABLE"):
            self.keyword("CREATE", "TABLE")
            table = self.ident("table")
            self.punct("(")
            columns = [self.column_def()]
            while self.peek().text == ",":
                self.next()
                columns.append(self.column_def())
            self.punct(")")
            return CreateTable(table, tuple(columns))
        if self.at_keyword("CREATE", "INDEX"):
            self.keyword("CREATE", "INDEX")
            index = self.ident("index")
            self.keyword("ON")
            table = self.ident("table")
            return CreateIndex(index, table, self.name_list("column"))
        if self.at_keyword("DROP", "TABLE"):
            self.keyword("DROP", "TABLE")
            return DropTable(self.ident("table"))
        if self.at_keyword("DROP", "INDEX"):
            self.keyword("DROP", "INDEX")
            return DropIndex(self.ident("index"))
        if self.at_keyword("ALTER", "INDEX"):
            self.keyword("ALTER", "INDEX")
            index = self.ident("index")
            if self.at_keyword("REMOVE"):
                self.keyword("REMOVE")
                return IndexState(index, REMOVED)
            self.keyword("SET", "STATE")
            tok = self.next()
            state = tok.text.upper()
            if tok.kind != "ident" or state not in INDEX_TARGET_STATES:
                raise DdlInvalid(f"expected one of {', '.join(INDEX_TARGET_STATES)} at {tok.pos}")
            return IndexState(index, state)
        if self.at_keyword("ALTER", "TABLE"):
            self.keyword("ALTER", "TABLE")
            return self.alter_table(self.ident("table"))
        tok = self.peek()
        raise DdlInvalid(f"unknown statement starting with {tok.text or 'end'!r}")

    def alter_table(self, table: str) -> DdlCommand:
        if self.at_keyword("RENAME", "TO"):
            self.keyword("RENAME", "TO")
            return RenameTable(table, self.ident("table"))
        if self.at_keyword("RENAME", "COLUMN"):
            self.keyword("RENAME", "COLUMN")
            column = self.ident("column")
            self.keyword("TO")
            return RenameColumn(table, column, self.ident("column"))
        if self.at_keyword("ADD"):
            self.keyword("ADD")
            if self.at_keyword("COLUMN"):
                self.keyword("COLUMN")
            return AddColumn(table, self.column_def())
        if self.at_keyword("DROP"):
            self.keyword("DROP")
            if self.at_keyword("COLUMN"):
                self.keyword("COLUMN")
            return DropColumn(table, self.ident("column"))
        if self.at_keyword("ALTER"):
            self.keyword("ALTER")
            if self.at_keyword("COLUMN"):
                self.keyword("COLUMN")
            column = self.ident("column")
            if self.at_keyword("SET", "DATA", "TYPE"):
                self.keyword("SET", "DATA", "TYPE")
                return AlterType(table, column, self.type_())
            if self.at_keyword("SET", "NOT", "NULL"):
                self.keyword("SET", "NOT", "NULL")
                return SetNotNull(table, column)
            if self.at_keyword("DROP", "NOT", "NULL"):
                self.keyword("DROP", "NOT", "NULL")
                return DropNotNull(table, column)
            if self.at_keyword("SET", "DEFAULT"):
                self.keyword("SET", "DEFAULT")
                return SetDefault(table, column, self.literal())
            if self.at_keyword("DROP", "DEFAULT"):
                self.keyword("DROP", "DEFAULT")
                return DropDefault(table, column)
            tok = self.peek()
            raise DdlInvalid(f"unknown ALTER COLUMN action at {tok.pos}: {tok.text or 'end'!r}")
        tok = self.peek()
        raise DdlInvalid(f"unknown ALTER TABLE action at {tok.pos}: {tok.text or 'end'!r}")


def parse_ddl(stmt: str) -> DdlCommand:
    """Parse one DDL statement (a trailing `;` is allowed); raises DdlInvalid."""
    if not isinstance(stmt, str):
        raise DdlInvalid(f"a DDL statement must be a string, got {type(stmt).__name__}")
    parser = _Parser(stmt)
    cmd = parser.statement()
    parser.end()
    return cmd
