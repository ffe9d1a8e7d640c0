"""The read-only SQL guard: admits one read statement, refuses everything else before it runs.

Two checks, both must pass: DuckDB's own parser must see exactly one statement of type SELECT (or
an EXPLAIN of one), and the statement must open with a read keyword (SELECT, WITH, FROM, VALUES,
TABLE, SHOW, DESCRIBE, SUMMARIZE, EXPLAIN). The parser catches `WITH ... INSERT`, the keyword check
keeps PRAGMA, CALL, SET and the like out even where DuckDB rewrites them into a SELECT. The
read-only, locked-down connection is the second line of defence, not the first.
"""

from __future__ import annotations

import re
import threading

from deltastate.errors import QueryError

READ_KEYWORDS = frozenset({"SELECT", "WITH", "FROM", "VALUES", "TABLE", "SHOW", "DESCRIBE", "DESC", "SUMMARIZE"})
ALLOWED_HINT = "use a single SELECT, WITH, SHOW, DESCRIBE or EXPLAIN statement"
_LEADING_NOISE = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/|\()*", re.S)
_WORD = re.compile(r"[A-Za-z_]+")
_EXPLAIN = re.compile(r"^EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^)]*\)\s*)?", re.I)
# extract_statements runs on DuckDB's default connection, which is not safe to share across threads.
_PARSE_LOCK = threading.Lock()


def first_keyword(statement: str) -> str:
    """The statement's first word, upper-cased, skipping whitespace, comments and '('."""
    rest = _LEADING_NOISE.sub("", statement, count=1)
    match = _WORD.match(rest)
    return match.group(0).upper() if match else ""


def _parse(query: str) -> list:
    import duckdb

    with _PARSE_LOCK:
        try:
            return list(duckdb.extract_statements(query))
        except duckdb.Error as exc:
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise QueryError(f"invalid SQL: {first_line}") from exc


def _refuse(what: str) -> QueryError:
    return QueryError(f"read-only: {what} statements are not allowed; {ALLOWED_HINT}")


def check_read_only(query: str) -> str:
    """Return the single read statement in query (without a trailing ';'); QueryError otherwise."""
    import duckdb

    if not query or not query.strip():
        raise QueryError(f"read-only: empty query; {ALLOWED_HINT}")
    statements = _parse(query)
    if len(statements) != 1:
        raise QueryError(f"read-only: exactly one statement is allowed, got {len(statements)}")
    statement = statements[0]
    text = statement.query.strip().rstrip(";").strip()
    keyword = first_keyword(text)
    statement_type = statement.type  # DuckDB's parse of the statement: SELECT, EXPLAIN, INSERT, ...
    if statement_type == duckdb.StatementType.EXPLAIN and keyword == "EXPLAIN":
        inner = _EXPLAIN.sub("", _LEADING_NOISE.sub("", text, count=1), count=1)
        check_read_only(inner)  # EXPLAIN ANALYZE runs its statement: it must be a read as well
        return text
    if statement_type != duckdb.StatementType.SELECT:
        raise _refuse(statement_type.name)
    if keyword not in READ_KEYWORDS:
        raise _refuse(keyword or "this")
    return text


__all__ = ["READ_KEYWORDS", "check_read_only", "first_keyword"]
