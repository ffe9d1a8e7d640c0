"""The two validation paths of deltastate.ingest.decode.classify agree on every record: the typed
parse that vouches for most records, and the variant parse every other record takes. A corpus of
tricky values runs through both on real Spark; each record's reason and typed values must be the
same, and each reason's category must be the one tests/reference.py computes independently."""

import dataclasses
import json
import math
import re

import pytest
from support.json_fuzz import fuzzed_objects
from support.reference import category
from support.store_checks import STORE, event

from deltastate.ingest.decode import classify
from deltastate.ingest.validate import record_reason
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

LIMIT = 2048


def _doc(**fields) -> bytes:
    base = {"player_id": "p", "game_id": "g", "score": 1, "ts": 1}
    base.update(fields)
    return json.dumps(base).encode()


# Known gaps (README): Spark's JSON readers stop after the first complete value, so text after the
# object that itself ends in '}' is not seen; its variant parser refuses a lone surrogate escape,
# which reads as a missing field where Python's json accepts it.
CONCATENATED = (b"p", b'{"player_id": "p", "game_id": "g", "score": 1, "ts": 1}{"x": 1}')
BRACE_AFTER = (b"p", b'{"player_id": "p", "game_id": "g", "score": 1, "ts": 1} x}')
LONE_SURROGATE = (b"p", b'{"player_id": "p", "game_id": "g\\ud800", "score": 1, "ts": 1}')
KNOWN_GAPS = {CONCATENATED: None, BRACE_AFTER: None, LONE_SURROGATE: "schema"}
# Byte sequences around the edges of well-formed UTF-8: overlong forms, surrogates, past U+10FFFF,
# cut short, bytes that never start a sequence, and the first and last well-formed of each length.
UTF8_EDGES = [b"\xc0\x80", b"\xc1\xbf", b"\xc2\x80", b"\xdf\xbf", b"\xe0\x9f\xbf", b"\xe0\xa0\x80",
              b"\xed\x9f\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xee\x80\x80", b"\xef\xbf\xbf",
              b"\xf0\x8f\xbf\xbf", b"\xf0\x90\x80\x80", b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80",
              b"\xf5\x80\x80\x80", b"\xe2\x82", b"\xf0\x9f\x8e", b"\x80", b"\xbf", b"\xe2\x82\xac\x80",
              b"\xe2\x28\xa1"]
# (kafka key, value): strings that read like other JSON kinds, every field of every wrong kind,
# and the places where a lenient JSON reader would accept what JSON does not.
CORPUS: list[tuple[bytes | None, bytes | None]] = [
    (b"p", _doc()),
    (b"p", _doc(note={"player_id": 5})),  # a nested field of the same name is not the field
    (b"p", b' \n\t{"player_id": "p", "game_id": "g", "score": 0, "ts": 0} \n'),
    (b"p", _doc(score=2**63 - 1, ts=2**53 + 1)),
    (b"p", _doc(score=2**63)), (b"p", _doc(score=-(2**63))), (b"p", _doc(score=-1)),
    *[(key.encode(), _doc(player_id=key)) for key in
      ("123", "-x", "{a", "[x]", "true", "false", "null", "tru", "1e5", "", "ü-🎮")],
    *[(b"p", _doc(game_id=v)) for v in ("false", "0", "{}", "[]", "-", "null")],
    *[(b"p", _doc(player_id=v)) for v in (123, -1, 1.5, True, False, None, {"a": 1}, [1], ["p"])],
    *[(b"p", _doc(game_id=v)) for v in (0, True, None, {}, [])],
    *[(b"p", _doc(score=v)) for v in ("12", "", "NaN", 12.5, 12.0, True, None, {"x": 1}, [1], 0, -0)],
    *[(b"p", _doc(ts=v)) for v in ("2024-01-01", 1.0, False, None, [])],
    (b"p", b'{"player_id": "p", "game_id": "g", "score": 1e2, "ts": 1}'),
    (b"p", b'{"player_id": "p", "game_id": "g", "score": 1E0, "ts": 1}'),
    (b"p", b'{"player_id": "p", "game_id": "g", "score": NaN, "ts": 1}'),
    (b"p", b'{"player_id": "p", "game_id": "g", "score": Infinity, "ts": 1}'),
    (b"p", b'{"player_id": "p", "game_id": "g", "score": -Infinity, "ts": 1}'),
    (b"p", b'{"player_id": "p", "game_id": "g", "score": 012, "ts": 1}'),
    (b"p", b'{"player_id": "p", "game_id": "g", "score": +1, "ts": 1}'),
    (b"p", b"{'player_id': 'p', 'game_id': 'g', 'score': 1, 'ts': 1}"),
    (b"p", b'{player_id: "p", "game_id": "g", "score": 1, "ts": 1}'),
    (b"p", b'{"player_id": "p", /* c */ "game_id": "g", "score": 1, "ts": 1}'),
    (b"p", b'{"player_id": "p", "game_id": "g", "score": 1, "ts": 1,}'),
    (b"p", b'{"player_id": "\\u0070", "game_id": "\\"g\\"", "score": 1, "ts": 1}'),
    (b"p", b'{"player_id": "p", "game_id": "a\\qb", "score": 1, "ts": 1}'),
    (b"p", b'{"player_id": "p", "game_id": "a\tb", "score": 1, "ts": 1}'),
    (b"p", b'{"player_id": "p", "game_id": "g", "score": 1, "ts": 1} trailing'),
    *KNOWN_GAPS,
    # A duplicate field: the last one counts, whether the first was well-formed or not.
    (b"p", b'{"player_id": "p", "game_id": "g", "score": 1, "ts": 1, "score": "x"}'),
    (b"p", b'{"player_id": "p", "game_id": "g", "score": "x", "ts": 1, "score": 2}'),
    (b"p", b'{"player_id": "p", "game_id": "g", "score": 1, "ts": 1, "score": 1.5}'),
    (b"p", b'{"player_id": "p", "game_id": "g", "score": 1, "ts": 1, "player_id": 5}'),
    (b"p", b'{"player_id": "p", "game_id": "g", "score": 1, "ts": 1, "game_id": 1e400}'),
    (b"p", b'{"player_id": "p", "game_id": 1e400, "score": 1, "ts": 1}'),
    (b"p", b'{"player_id": "p", "game_id": -1e400, "score": 1, "ts": 1}'),
    (b"p", b'{"player_id": "p", "game_id": "g\xff", "score": 1, "ts": 1}'),  # not UTF-8
    # UTF-8 at each edge of the standard's table 3-7, in a declared field and in one skipped
    *[(b"p", _doc(game_id="gMARK").replace(b"MARK", seq)) for seq in UTF8_EDGES],
    *[(b"p", _doc(extra="MARK").replace(b"MARK", seq)) for seq in UTF8_EDGES],
    (b"p", b'{"player_id": "p", "game_id": "\\ud83c\\udfae", "score": 1, "ts": 1}'),  # a surrogate pair
    (b"p", b'{"Player_ID": "p", "game_id": "g", "score": 1, "ts": 1}'), (b"p", _doc(Score="x")),
    (b"p", b'[{"player_id": "p", "game_id": "g", "score": 1, "ts": 1}]'),
    (b"p", b'"p"'), (b"p", b"42"), (b"p", b"null"), (b"p", b"true"), (b"p", b"{}"), (b"p", b"[]"),
    (b"p", b""), (b"p", b"not json"), (b"p", b'{"player_id": "p", "score": '), (b"p", b"\xff\xfe{}"),
    (b"q", _doc()), (None, _doc()), (None, None), (b"p", None),
    (b"p", event("p", 1, 1, pad="x" * LIMIT)),
]


@pytest.fixture(scope="module")
def both_paths(spark, session_settings):
    store = load_store(session_settings, STORE)
    rows = [("t", 0, offset, 0, key, value) for offset, (key, value) in enumerate(CORPUS)]
    records = (spark.createDataFrame(rows, "topic string, partition int, offset long, ts long, key binary, value binary")
               .selectExpr("*", "timestamp_millis(ts) as timestamp").drop("ts"))
    fields = ["offset", "reason", "key_str", "is_tombstone", *store.source.properties]

    def run(typed_path: bool) -> dict[int, dict]:
        out = classify(records, store, LIMIT, typed_path=typed_path).select(*fields).collect()
        return {row["offset"]: row.asDict() for row in out}

    return run(True), run(False)


def test_both_paths_give_each_record_the_same_reason_and_values(both_paths) -> None:
    typed, variant_only = both_paths
    assert len(typed) == len(CORPUS) == len(variant_only)
    differ = {CORPUS[o]: (typed[o], variant_only[o]) for o in typed if typed[o] != variant_only[o]}
    assert differ == {}


def test_each_reason_is_in_the_category_the_reference_computes(both_paths) -> None:
    typed, _ = both_paths
    got = {CORPUS[o]: (typed[o]["reason"] or "").split(":")[0] or None for o in typed}
    want = {kv: category(kv[0], kv[1], LIMIT) for kv in CORPUS}
    for gap, category_here in KNOWN_GAPS.items():
        assert want.pop(gap) != category_here and got.pop(gap) == category_here, gap
    assert got == want
    assert sum(reason is None for reason in got.values()) >= 20  # the corpus keeps valid records too


def test_the_python_validator_gives_each_record_the_engines_category(both_paths, session_settings) -> None:
    """Reads at consistency=latest validate uncommitted records in Python (ingest/validate.py); a
    record the engine dead-letters must not be applied there, nor one it applies refused, the
    known gaps of the Spark readers included."""
    typed, _ = both_paths
    store = load_store(session_settings, STORE)
    engine = {CORPUS[o]: (typed[o]["reason"] or "").split(":")[0] or None for o in typed}
    python = {kv: (record_reason(kv[0], kv[1], store, LIMIT) or "").split(":")[0] or None for kv in CORPUS}
    assert python == engine
    assert sum(reason is None for reason in python.values()) >= 20


def _from_json_calls(frame) -> int:
    return frame._jdf.queryExecution().optimizedPlan().toString().count("from_json")


def test_a_batchs_dead_letters_read_again_from_kafka_are_the_failing_records_each_parsed_once(
        spark, broker, session_settings, topic) -> None:
    """The key-value engine reads a batch's offset range again for its dead letters. They must be
    exactly the records classify fails, and the filter must not be pushed into the parse: inlined,
    it repeated the JSON parses hundreds of times per record (721 calls in the optimized plan)."""
    from deltastate.engine.keyvalue.audit import reread_dead_letters
    from deltastate.ingest.producer import ensure_topic, produce_records

    store = load_store(session_settings, STORE)
    ensure_topic(broker, topic, 1)
    produce_records(broker, topic, CORPUS)
    settings = dataclasses.replace(session_settings, max_value_bytes=LIMIT)
    plain = classify(spark.read.format("kafka").option("kafka.bootstrap.servers", broker)
                     .option("subscribe", topic).load(), store, LIMIT)
    with reread_dead_letters(spark, settings, store, topic, {0: (0, len(CORPUS) - 1)}) as failed:
        assert _from_json_calls(failed) <= _from_json_calls(plain) + 2  # the cached plan, once
        got = {row["offset"]: row["reason"].split(":")[0] for row in failed.collect()}
    expected = {o: KNOWN_GAPS[kv] if kv in KNOWN_GAPS else category(kv[0], kv[1], LIMIT)
                for o, kv in enumerate(CORPUS)}
    want = {o: c for o, c in expected.items() if c is not None}
    assert got == want and len(got) >= 40


class _Pairs(list):
    """An object's (name, value) pairs in order, so duplicates stay visible."""


# A backslash-u escape: a backslash-u whose backslash is not itself escaped (an odd run of backslashes).
_UNICODE_ESCAPE = re.compile(rb"(?<!\\)(\\\\)*\\u")


def _finite(number: int | float) -> bool:
    try:
        return math.isfinite(float(number))
    except OverflowError:  # an integer beyond a double
        return False


def _typed_reference(value: bytes | None, types: dict[str, str]) -> dict | None:
    """What the typed read (JsonFields.java) must give, from Python's json: the declared fields
    (name -> JSON-schema type) of a plain object, each absent, null or of its JSON kind and range,
    none given twice; None for anything else, and for any backslash-u escape (the variant way)."""
    kinds = {"integer": lambda v: type(v) is int and -(2**63) <= v < 2**63,
             "number": lambda v: type(v) in (int, float) and _finite(v),
             "string": lambda v: type(v) is str, "boolean": lambda v: type(v) is bool}
    if value is None or _UNICODE_ESCAPE.search(value):
        return None
    try:
        doc = json.loads(value.decode("utf-8"), object_pairs_hook=_Pairs,
                         parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except ValueError:
        return None
    if not isinstance(doc, _Pairs) or not value.lstrip(b" \t\n\r").startswith(b"{"):
        return None
    names = [name for name, _ in doc if name in types]
    if len(names) != len(set(names)):
        return None
    fields = {name: v for name, v in doc if name in types}
    if any(v is not None and not kinds[types[n]](v) for n, v in fields.items()):
        return None
    # A number field is a double column: Python's int, exact however large, is compared as one.
    return {n: float(fields[n]) if types[n] == "number" and fields.get(n) is not None else fields.get(n) for n in types}


def test_the_typed_read_vouches_for_exactly_the_plain_objects(spark, session_settings) -> None:
    """Every record the typed read gives a struct is the plain object Python's json reads, field for
    field, and every other record gets null (and so the variant path): values with \\u escapes or
    bytes that are not well-formed UTF-8 among them."""
    from deltastate.ingest.decode import _typed_fields

    store = load_store(session_settings, STORE)
    props = store.source.properties
    values = [v for _, v in CORPUS]
    values += [b'{"score": 1, "score": 2}', b'{"player_id": "p", "extra": {"a": [1, {"b": null}]}, "ts": 3}',
               b'{"player_id": "p\x00"}', b'\xef\xbb\xbf{"ts": 1}', b'{"ts": 9223372036854775808}', b'{"ts": 1.0}',
               b'{"player_id": null, "score": null}', b'{"score": 1} ', b'{"score": 1}}', b'{"score": 1',
               b'{"extra": [1, 2,], "ts": 1}', b'{"extra": "a\xffb", "ts": 1}', b'{"game_id": "a\\\\u0041"}',
               b'{"ga\\"me_id": 1, "game_id": "a\\"\\\\\\/\\b\\f\\n\\r\\tb"}', b'{"ts": -0, "score": 12}',
               b'{"ts": 0.5e1}', b'{"ts": 1E2}', b'{"ts": -9223372036854775809}', b'{"ts": 00}', b'{"ts": -}']
    frame = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "i int, value binary")
    name = _typed_fields(frame, store)
    got = {row["i"]: row["t"] and row["t"].asDict() for row in frame.selectExpr("i", f"{name}(value) as t").collect()}
    types = {name: spec.get("type", "string") for name, spec in props.items()}
    want = {i: _typed_reference(v, types) for i, v in enumerate(values)}
    assert {values[i]: (got[i], want[i]) for i in got if got[i] != want[i]} == {}
    assert sum(v is not None for v in want.values()) >= 15


# One field of each kind the typed read gives, read by names the fuzzed objects use.
FUZZ_TYPES = {"player_id": "string", "score": "number", "ts": "integer", "ok": "boolean"}


def test_the_typed_read_agrees_with_pythons_json_on_random_and_broken_objects(spark) -> None:
    """Thousands of random objects, half of them broken a byte at a time (support/json_fuzz.py):
    the typed read gives each well-formed one Python's json values and null to every other."""
    from deltastate.ingest.decode import _FIELD_TYPE

    values = fuzzed_objects(list(FUZZ_TYPES), seed=20261207, count=6000)
    names, types = list(FUZZ_TYPES), [_FIELD_TYPE[t] for t in FUZZ_TYPES.values()]
    spark._jvm.io.deltastate.Udafs.registerJsonFields(spark._jsparkSession, "fuzz_fields", names, types)
    frame = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "i int, value binary")
    got = {row["i"]: row["t"] and row["t"].asDict() for row in frame.selectExpr("i", "fuzz_fields(value) as t").collect()}
    want = {i: _typed_reference(v, FUZZ_TYPES) for i, v in enumerate(values)}
    differ = {values[i]: (got[i], want[i]) for i in got if got[i] != want[i]}
    assert list(differ.items())[:5] == []
    assert len(got) == len(values)
    read = [w for w in want.values() if w is not None]
    assert len(read) >= 600  # well-formed objects of every kind are among them
    assert all(any(w[name] is not None for w in read) for name in FUZZ_TYPES)
