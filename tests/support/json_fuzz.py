"""Random JSON objects, well-formed and broken, for checking a JSON reader against Python's json.

Each value is an object of declared and undeclared members in random order, written with random
whitespace and number spellings (exponents, leading zeros, signs), strings with every two-byte
escape, backslash-u escapes and multi-byte UTF-8, nested arrays and objects; about half then get one
or two byte-level mutations (a byte dropped, inserted or replaced from a set of JSON's structural
bytes, a NUL, bytes outside UTF-8, or the text cut short). Seeded, so a failure reproduces."""

from __future__ import annotations

import json
import random

STRING_PIECES = ["a", "Z", " ", '\\"', "\\\\", "\\/", "\\n", "\\t", "\\b", "\\f", "\\r", "ü", "€", "🎮",
                 "\\u0041", "\\ud83c\\udfae", "\\\\u0041", "\\q", "\t", "\x01", "'", "{", "}", ",", ":", "[", "]"]
NUMBERS = ["0", "-0", "1", "-1", "42", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
           "-9223372036854775809", "123456789012345678", "1234567890123456789", "12345678901234567890123",
           "1.5", "-0.0", "0.1", "0.000123", "3.141592653589793", "1e2", "1E-2", "-2.5e+3", "1e400", "-1e400",
           "1e-400", "123456789012345.6", "1234567890123456.7", "0.30000000000000004", "2.0", "100",
           "999999999999999", "9007199254740993", "01", "1.", ".5", "-", "+1", "1e", "NaN", "Infinity"]
LITERALS = ["true", "false", "null", "true", "false", "null", "tru", "nul", "True"]
MUTATIONS = [b"\x00", b"\xff", b"\xc3", b"\x80", b"\\", b'"', b"{", b"}", b"[", b"]", b",", b":", b" ", b"\n",
             b"0", b"-", b".", b"e", b"t", b"n", b"u", b"\xe2\x82\xac", b"\xed\xa0\x80", b"/", b"*"]
# Names that equal a declared one only after unescaping, or differ from one only in case.
ODD_NAMES = ['"sc\\u006fre"', '"Score"', '"extra"', '"note"', '"🎮"', '"a\\"b"']


def _space(rng: random.Random) -> str:
    return rng.choice(["", "", "", " ", "\n", "\t ", "\r\n"])


def _string(rng: random.Random) -> str:
    return '"' + "".join(rng.choice(STRING_PIECES) for _ in range(rng.randint(0, 5))) + '"'


def _number(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.6:
        return rng.choice(NUMBERS)
    return repr(rng.uniform(-1e6, 1e6)) if roll < 0.8 else str(rng.randint(-10**6, 10**6))


def _value(rng: random.Random, depth: int) -> str:
    kind = rng.randint(0, 7 if depth < 3 else 5)
    if kind <= 1:
        return _string(rng)
    if kind <= 3:
        return _number(rng)
    if kind <= 5:
        return rng.choice(LITERALS)
    if kind == 6:
        items = [_space(rng) + _value(rng, depth + 1) + _space(rng) for _ in range(rng.randint(0, 3))]
        return "[" + ",".join(items) + "]"
    return _object(rng, [], depth + 1)


def _object(rng: random.Random, declared: list[str], depth: int) -> str:
    names = [json.dumps(name, ensure_ascii=False) for name in declared] + ODD_NAMES
    members = [_space(rng) + rng.choice(names) + _space(rng) + ":" + _space(rng) + _value(rng, depth) + _space(rng)
               for _ in range(rng.randint(0, 6))]
    return "{" + ",".join(members) + "}"


def fuzzed_objects(declared: list[str], seed: int, count: int) -> list[bytes]:
    """count values: objects whose members are mostly the declared names, half of them mutated."""
    rng = random.Random(seed)
    values = []
    for _ in range(count):
        doc = bytearray((_space(rng) + _object(rng, declared, 0) + _space(rng)).encode())
        for _ in range(rng.choice([0, 0, 1, 1, 2])):
            at = rng.randint(0, len(doc))
            action = rng.randint(0, 3)
            if action == 0:
                del doc[at:at + 1]
            elif action == 1:
                doc[at:at] = rng.choice(MUTATIONS)
            elif action == 2:
                doc[at:at + 1] = rng.choice(MUTATIONS)
            else:
                del doc[at:]
        values.append(bytes(doc))
    return values
