"""The REST endpoints. Thin: each parses its parameters, reads through ServiceState.reading() (the
same Queries functions the CLI uses) and shapes the answer; errors are raised as DeltastateError
and turned into typed JSON by the app's handler (answers.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Path, Query, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from deltastate.changelog.layout import KEY, SOURCE_PARTITION, store_key_columns
from deltastate.errors import KeyNotFoundError
from deltastate.query.consistency import check_consistency, served_version, shape_columns, shape_row
from deltastate.query.errors import ParameterError
from deltastate.query.latest import LatestPosition
from deltastate.query.location import locate
from deltastate.query.result import QueryResult
from deltastate.service.answers import JSONAnswer, decode_cursor, encode_cursor
from deltastate.service.freshness import Freshness, iso
from deltastate.service.sqlexec import run_sql
from deltastate.service.state import Reading, ReadOptions, ServiceState
from deltastate.service.tier.scope import partitions_asked, rank_value_asked
from deltastate.stores import list_stores

router = APIRouter()
Store = Annotated[str, Path(description="A declared store, e.g. player_stats")]
Key = Annotated[str, Path(description="The store key (the Kafka record key)")]


def state_of(request: Request) -> ServiceState:
    return request.app.state.service


def _options(max_staleness: float | None, fresh: bool, consistency: str | None, as_of_version: int | None,
             as_of: str | None, point_read: bool, schema_version: int | None = None) -> ReadOptions:
    if fresh and consistency not in (None, "committed"):
        raise ParameterError("fresh", f"fresh=true is consistency=committed; it contradicts consistency={consistency}")
    resolved = consistency or ("committed" if fresh else "snapshot")
    check_consistency(resolved, point_read)
    return ReadOptions(max_staleness, resolved, as_of_version, as_of, "consistency" if consistency else "fresh",
                       schema_version)


MaxStaleness = Annotated[float | None, Query(ge=0, allow_inf_nan=False,
                                             description="Refuse (503) an answer staler than this many seconds")]
Fresh = Annotated[bool, Query(description="Merge changelog commits newer than the snapshot (consistency=committed)")]
Consistency = Annotated[Literal["snapshot", "committed", "latest"] | None, Query(
    description="snapshot: the published snapshot; committed: plus the changelog commits after it; latest "
                "(key-value point reads): plus the source records the stream has not committed yet")]
SchemaVersion = Annotated[int | None, Query(ge=1, description="Answer in this value schema version's shape (a "
                                                              "client written for an older version)")]
AsOfVersion = Annotated[int | None, Query(ge=1, description="Answer from this retained snapshot version")]
AsOf = Annotated[str | None, Query(description="Answer from the newest retained snapshot published at or before "
                                               "this time (epoch ms or ISO-8601, UTC without zone)")]


def read_options(max_staleness: MaxStaleness = None, fresh: Fresh = False, consistency: Consistency = None,
                 as_of_version: AsOfVersion = None, as_of: AsOf = None,
                 schema_version: SchemaVersion = None) -> ReadOptions:
    return _options(max_staleness, fresh, consistency, as_of_version, as_of, False, schema_version)


def point_read_options(max_staleness: MaxStaleness = None, fresh: Fresh = False, consistency: Consistency = None,
                       as_of_version: AsOfVersion = None, as_of: AsOf = None,
                       schema_version: SchemaVersion = None) -> ReadOptions:
    return _options(max_staleness, fresh, consistency, as_of_version, as_of, True, schema_version)


Options = Annotated[ReadOptions, Depends(read_options)]
TOP_MAX = 10_000  # the most keys one top read returns
PointOptions = Annotated[ReadOptions, Depends(point_read_options)]
Limit = Annotated[int | None, Query(ge=1, description="Page size")]


def _answer(reading: Reading, body: dict[str, Any], latest: LatestPosition | None = None) -> JSONAnswer:
    if isinstance(body.get("store"), str):
        _shape(reading, body)
    body["meta"] = reading.freshness.body()
    if isinstance(body.get("store"), str):
        body["meta"]["schema_version"] = body.pop("_schema_version")
    if latest is not None:
        # Which records the answer includes, per source partition of the keys read.
        body["meta"]["consistency"] = "latest"
        body["meta"]["latest"] = latest.body()
    return JSONAnswer(body, headers=reading.freshness.headers())


def _shape(reading: Reading, body: dict[str, Any]) -> None:
    """A single-store answer in the value schema version asked for (schema_version=N): rows of the
    snapshot's version converted down (query/consistency.py shape_row); the version served goes into meta."""
    definition = reading.queries.store(body["store"])
    served = served_version(definition, reading.schema_version)
    body["_schema_version"] = served
    if served == definition.value_version:
        return
    if isinstance(body.get("value"), dict):
        body["value"] = shape_row(definition, body["value"], served)
    if isinstance(body.get("rows"), list):
        body["rows"] = [shape_row(definition, row, served) if isinstance(row, dict) else row for row in body["rows"]]
    if isinstance(body.get("columns"), list):
        body["columns"] = shape_columns(definition, body["columns"], served)


def _rows(result: QueryResult) -> dict[str, Any]:
    return {"columns": result.columns, "rows": result.rows}


def _page_limit(state: ServiceState, limit: int | None) -> int:
    if limit is not None and limit > state.options.page_max:
        raise ParameterError("limit", f"at most {state.options.page_max}, got {limit}")
    return limit or state.options.page_default


def _paged(state: ServiceState, reading: Reading, store: str, result: QueryResult, limit: int) -> JSONAnswer:
    keys = store_key_columns(reading.queries.store(store))
    more = len(result.rows) == limit
    cursor = encode_cursor([result.rows[-1][c] for c in keys]) if more and result.rows else None
    return _answer(reading, {"store": store, **_rows(result), "next_cursor": cursor})


# -- health, stores ----------------------------------------------------------------------------
@router.get("/health", tags=["service"])
def health(request: Request) -> Response:
    """200 while a snapshot can be served, 503 before the first publish."""
    state = state_of(request)
    with state.pool.lease() as snap:
        return JSONAnswer({"status": "ok", "snapshot_version": snap.version, "published_at": iso(snap.published_at)})


@router.get("/stores", tags=["stores"])
def stores(request: Request, options: Options) -> Response:
    """Every declared store: type, key and value schema, rows, and how stale its snapshot table is."""
    state = state_of(request)
    names = list_stores(state.settings)
    with state.reading([], options) as reading:
        out = []
        for name in names:
            d = reading.queries.store(name)
            info = reading.snapshot.store_info.get(name)
            staleness, held, newest = state.freshness.store_staleness(reading.snapshot, name)
            out.append({"store": name, "type": d.type, "description": d.description,
                        "key": {"field": d.key_field, "columns": list(store_key_columns(d))},
                        "value_schema": {"name": d.value_schema_name, "version": d.value_version,
                                         "fields": [{"name": f.name, "type": f.type} for f in d.value_fields]},
                        "leaderboard_by": d.leaderboard_default_by, "in_snapshot": info is not None,
                        "row_count": None if info is None else info.row_count,
                        "changelog_version": held, "newest_changelog_version": newest,
                        "staleness_seconds": staleness})
        return _answer(reading, {"stores": out})


# -- key-value reads -------------------------------------------------------------------------------
@router.get("/stores/{store}/keys/{key}", tags=["key-value"])
def get_key(request: Request, store: Store, key: Key, options: PointOptions) -> Response:
    """The key's value (Kafka Streams ReadOnlyKeyValueStore.get); 404 when absent."""
    with state_of(request).reading([store], options) as reading:
        if reading.latest is None:
            queries = reading.queries.scoped(partitions_asked(request))
            return _answer(reading, {"store": store, "key": key, "value": queries.get(store, key).row})
        rows, position = reading.latest.get_many(reading.queries, store, [key])
        if not rows:
            raise KeyNotFoundError(store, key)
        return _answer(reading, {"store": store, "key": key, "value": rows[0]}, position)


BATCH_GET_MAX = 1_000


class BatchGetRequest(BaseModel):
    keys: list[str] = Field(min_length=1, max_length=BATCH_GET_MAX,
                            description=f"The keys to read, at most {BATCH_GET_MAX:,}; answered in this order")


@router.post("/stores/{store}/keys:batchGet", tags=["key-value"])
def batch_get(request: Request, store: Store, body: Annotated[BatchGetRequest, Body()],
              options: PointOptions) -> Response:
    """Many keys in one request, from one snapshot: the rows found in the order asked, and the keys
    missing."""
    with state_of(request).reading([store], options) as reading:
        result = reading.queries.scoped(partitions_asked(request)).get_many(store, body.keys)
        position = None
        if reading.latest is not None:
            rows, position = reading.latest.get_many(reading.queries, store, body.keys)
            result = QueryResult(result.snapshot_version, result.columns or list(rows[0]) if rows else result.columns,
                                 rows)
        found = {row[KEY] for row in result.rows}
        return _answer(reading, {"store": store, **_rows(result),
                                 "missing": [k for k in dict.fromkeys(body.keys) if k not in found]}, position)


@router.get("/stores/{store}/range", tags=["key-value"])
def key_range(request: Request, store: Store, options: Options,
              from_key: Annotated[str | None, Query(alias="from", description="First key (inclusive)")] = None,
              to_key: Annotated[str | None, Query(alias="to", description="Last key (inclusive)")] = None,
              limit: Limit = None,
              cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None) -> Response:
    """Keys from..to in key order, one page at a time (range(from, to))."""
    state = state_of(request)
    size, after = _page_limit(state, limit), decode_cursor(cursor)
    with state.reading([store], options) as reading:
        queries = reading.queries.scoped(partitions_asked(request))
        return _paged(state, reading, store, queries.range(store, from_key, to_key, size, after), size)


@router.get("/stores/{store}/all", tags=["key-value"])
def all_keys(request: Request, store: Store, options: Options, limit: Limit = None,
             cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None) -> Response:
    """Every entry in store-key order, one page at a time (all())."""
    state = state_of(request)
    size, after = _page_limit(state, limit), decode_cursor(cursor)
    with state.reading([store], options) as reading:
        return _paged(state, reading, store, reading.queries.scoped(partitions_asked(request)).all(store, size, after),
                      size)


@router.get("/stores/{store}/top", tags=["leaderboard"])
def top(request: Request, store: Store, options: Options,
        n: Annotated[int, Query(ge=1, le=TOP_MAX, description="How many keys")] = 10,
        by: Annotated[str | None, Query(description="Numeric value column (default: the store's)")] = None) -> Response:
    """The n best keys by a numeric column, descending, ties by key."""
    with state_of(request).reading([store], options) as reading:
        queries = reading.queries.scoped(partitions_asked(request))
        return _answer(reading, {"store": store, **_rows(queries.top(store, n=n, by=by))})


@router.get("/stores/{store}/keys/{key}/rank", tags=["leaderboard"])
def rank(request: Request, store: Store, key: Key, options: Options,
         by: Annotated[str | None, Query(description="Numeric value column (default: the store's)")] = None) -> Response:
    """The key's 1-based position in the top ordering."""
    with state_of(request).reading([store], options) as reading:
        queries = reading.queries.scoped(partitions_asked(request))
        counting, value = rank_value_asked(request)
        if counting:  # a part of a scattered rank whose partitions do not hold the key
            above = queries.count_above(store, key, value, by=by)
            return _answer(reading, {"store": store, "key": key, "rank": above + 1, "row": None})
        row = queries.rank(store, key, by=by).row
        return _answer(reading, {"store": store, "key": key, "rank": row["rank"], "row": row})


# -- window and session reads ------------------------------------------------------------------------
@router.get("/stores/{store}/keys/{key}/windows", tags=["windows"])
def key_windows(request: Request, store: Store, key: Key, options: Options,
                time_from: Annotated[str | None, Query(alias="from", description="Earliest window start")] = None,
                time_to: Annotated[str | None, Query(alias="to", description="Latest window start")] = None) -> Response:
    """WindowStore.fetch(key, from, to): the key's windows starting in [from, to], by start."""
    with state_of(request).reading([store], options) as reading:
        return _answer(reading, {"store": store, "key": key,
                                 **_rows(reading.queries.windows(store, key, time_from, time_to))})


@router.get("/stores/{store}/windows", tags=["windows"])
def all_windows(request: Request, store: Store, options: Options,
                time_from: Annotated[str | None, Query(alias="from", description="Earliest window start")] = None,
                time_to: Annotated[str | None, Query(alias="to", description="Latest window start")] = None,
                limit: Limit = None) -> Response:
    """WindowStore.fetchAll(from, to): every key's windows starting in [from, to], by (start, key)."""
    state = state_of(request)
    size = _page_limit(state, limit)
    with state.reading([store], options) as reading:
        result = reading.queries.windows(store, None, time_from, time_to, size)
        return _answer(reading, {"store": store, **_rows(result), "truncated": len(result.rows) == size})


@router.get("/stores/{store}/keys/{key}/sessions", tags=["sessions"])
def key_sessions(request: Request, store: Store, key: Key, options: Options,
                 earliest_end: Annotated[str | None, Query(description="Sessions ending at or after")] = None,
                 latest_start: Annotated[str | None, Query(description="Sessions starting at or before")] = None
                 ) -> Response:
    """SessionStore.findSessions(key, earliest_end, latest_start), by session start."""
    with state_of(request).reading([store], options) as reading:
        return _answer(reading, {"store": store, "key": key,
                                 **_rows(reading.queries.sessions(store, key, earliest_end, latest_start))})


# -- metadata ------------------------------------------------------------------------------------------
@router.get("/stores/{store}/keys/{key}/metadata", tags=["metadata"])
def key_metadata(request: Request, store: Store, key: Key, options: Options) -> Response:
    """queryMetadataForKey: the topic the store's stream reads, the key's partition of it (murmur2, as
    the producer places it), the instances of the query tier that answer for that partition (the
    active one and its standbys; null and [] for a single instance) and the snapshot and changelog
    versions that hold it."""
    state = state_of(request)
    with state.reading([store], options) as reading:
        where = locate(state.settings, reading.queries.store(store), key)
        view = None if state.tier is None else state.tier.view
        found = reading.queries.range(store, key, key, limit=1)
        fresh: Freshness = reading.freshness
        return _answer(reading, {
            "store": store, "key": key, "topic": where.topic, "partitions": where.partitions,
            "partition": where.partition,
            "active_host": None if view is None else view.owner(where.topic, where.partition),
            "standby_hosts": [] if view is None else view.standbys(where.topic, where.partition),
            "present": bool(found.rows),
            "source_partition": found.rows[0].get(SOURCE_PARTITION) if found.rows else None,
            "snapshot_version": fresh.snapshot_version, "changelog_version": fresh.changelog_version,
            "newest_changelog_version": fresh.newest_changelog_version})


# -- SQL -----------------------------------------------------------------------------------------------
class SqlRequest(BaseModel):
    query: str = Field(description="One read-only statement: SELECT, WITH, SHOW, DESCRIBE or EXPLAIN")


@router.post("/sql", tags=["sql"])
def sql(request: Request, body: Annotated[SqlRequest, Body()],
        max_staleness: Annotated[float | None, Query(ge=0, allow_inf_nan=False)] = None,
        as_of_version: Annotated[int | None, Query(ge=1)] = None) -> Response:
    """Read-only SQL over the snapshot (tables: the stores, _snapshot, _snapshot_stores), within the
    service's time and row limits; anything else is refused with 400 before it runs."""
    state = state_of(request)
    options = ReadOptions(max_staleness=max_staleness, as_of_version=as_of_version)
    with state.reading([], options) as reading:
        result = run_sql(state.queries, reading.snapshot, body.query, state.options.sql_timeout_s,
                         state.options.sql_max_rows)
        return _answer(reading, _rows(result))


__all__ = ["router"]
