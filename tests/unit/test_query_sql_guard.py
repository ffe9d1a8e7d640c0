"""The read-only SQL guard: one read statement passes, anything that writes or configures is refused."""

from __future__ import annotations

import pytest

from deltastate.errors import QueryError
from deltastate.query.guard import check_read_only, first_keyword


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM player_stats",
        "select key, total_score from player_stats where key = ';drop table x' order by 2 desc;",
        "  -- leading comment\n/* block */ SELECT 1",
        "WITH t AS (SELECT 1 AS x) SELECT x FROM t",
        "(SELECT 1) UNION ALL (SELECT 2)",
        "FROM player_stats LIMIT 3",
        "VALUES (1, 'a')",
        "TABLE player_stats",
        "SHOW TABLES",
        "DESCRIBE player_stats",
        "SUMMARIZE player_stats",
        "EXPLAIN SELECT * FROM player_stats",
        "EXPLAIN ANALYZE SELECT count(*) FROM player_stats",
    ],
)
def test_reads_pass(query: str) -> None:
    statement = check_read_only(query)
    assert not statement.endswith(";")
    assert statement.strip()


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("INSERT INTO player_stats VALUES ('k', 1)", "INSERT"),
        ("UPDATE player_stats SET games = 0", "UPDATE"),
        ("DELETE FROM player_stats", "DELETE"),
        ("DROP TABLE player_stats", "DROP"),
        ("CREATE TEMP TABLE x AS SELECT 1", "CREATE"),
        ("CREATE VIEW v AS SELECT 1", "CREATE"),
        ("WITH t AS (SELECT 1) INSERT INTO player_stats SELECT * FROM t", "INSERT"),
        ("COPY player_stats TO '/tmp/out.csv'", "COPY"),
        ("ATTACH '/tmp/other.duckdb' AS other", "ATTACH"),
        ("DETACH other", "DETACH"),
        ("EXPORT DATABASE '/tmp/dump'", "EXPORT"),
        ("PRAGMA version", "PRAGMA"),
        ("CALL pragma_version()", "CALL"),
        ("SET enable_external_access = true", "SET"),
        ("RESET lock_configuration", "SET"),
        ("USE memory", "SET"),
        ("INSTALL httpfs", "LOAD"),
        ("LOAD httpfs", "LOAD"),
        ("CHECKPOINT", "CALL"),
        ("BEGIN TRANSACTION", "TRANSACTION"),
        ("EXPLAIN ANALYZE INSERT INTO player_stats VALUES ('k', 1)", "INSERT"),
        ("EXPLAIN ANALYZE DELETE FROM player_stats", "DELETE"),
    ],
)
def test_writes_and_commands_refused(query: str, why: str) -> None:
    with pytest.raises(QueryError, match=r"^read-only: ") as info:
        check_read_only(query)
    assert why in str(info.value)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT 1; SELECT 2",
        "SELECT 1; DROP TABLE player_stats",
        "SELECT 1;INSERT INTO t VALUES (1)",
    ],
)
def test_more_than_one_statement_refused(query: str) -> None:
    with pytest.raises(QueryError, match=r"^read-only: exactly one statement"):
        check_read_only(query)


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_empty_refused(query: str) -> None:
    with pytest.raises(QueryError, match=r"^read-only: empty query"):
        check_read_only(query)


def test_syntax_error_is_a_query_error() -> None:
    with pytest.raises(QueryError, match=r"^invalid SQL: "):
        check_read_only("SELEC 1 FROM")


def test_semicolon_inside_a_string_is_one_statement() -> None:
    assert check_read_only("SELECT ';' AS s; ") == "SELECT ';' AS s"


@pytest.mark.parametrize(
    ("statement", "keyword"),
    [("select 1", "SELECT"), ("  -- c\n  ((with x", "WITH"), ("/* a\n b */explain x", "EXPLAIN"), ("", "")],
)
def test_first_keyword(statement: str, keyword: str) -> None:
    assert first_keyword(statement) == keyword
