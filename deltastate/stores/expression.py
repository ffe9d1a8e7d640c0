"""Derived value fields: arithmetic over a store's other value fields (`avg_score: total_score / games`).

One parser and two evaluators of the same tree, so that every place that computes a derived field
agrees: Spark columns for the engine's changelog records, Python for reads folded outside Spark.
The language is deliberately small: field names, numbers, + - * /, unary minus and parentheses.
A null operand gives null; division by zero gives null (as SQL's try_divide), never an error that
would fail, and on every replay fail again, a micro-batch.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

    from deltastate.stores.definition import StoreDefinition

_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
# The same for floats and Spark columns; division differs (null on zero) and is written out in each.
_ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul}


class ExpressionError(ValueError):
    """A derivation that is not in the expression language; the message names the part refused."""


@dataclass(frozen=True)
class Field:
    name: str


@dataclass(frozen=True)
class Number:
    value: float | int


@dataclass(frozen=True)
class Negate:
    operand: Node


@dataclass(frozen=True)
class Binary:
    op: str  # one of + - * /
    left: Node
    right: Node


Node = Field | Number | Negate | Binary


def parse(text: str) -> Node:
    """The tree of `text`; ExpressionError names what is not allowed."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise ExpressionError(f"{text!r} is not an expression: {e.msg}") from None
    return _convert(tree, text)


def _convert(node: ast.AST, text: str) -> Node:
    if isinstance(node, ast.Name):
        return Field(node.id)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return Number(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return Negate(_convert(node.operand, text))
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return Binary(_OPS[type(node.op)], _convert(node.left, text), _convert(node.right, text))
    part = ast.get_source_segment(text.strip(), node) or type(node).__name__
    raise ExpressionError(f"{text!r}: {part!r} is not allowed; a derivation uses value fields, numbers, "
                          "+ - * / and parentheses")


def field_names(node: Node) -> set[str]:
    if isinstance(node, Field):
        return {node.name}
    if isinstance(node, Negate):
        return field_names(node.operand)
    if isinstance(node, Binary):
        return field_names(node.left) | field_names(node.right)
    return set()


def evaluate(node: Node, values: dict[str, object]) -> float | None:
    """The value of the tree over one row's values (None for a null operand or a division by zero),
    in double arithmetic as the Spark column computes it."""
    if isinstance(node, Number):
        return float(node.value)
    if isinstance(node, Field):
        value = values.get(node.name)
        return None if value is None else float(value)  # type: ignore[arg-type]
    if isinstance(node, Negate):
        inner = evaluate(node.operand, values)
        return None if inner is None else -inner
    left, right = evaluate(node.left, values), evaluate(node.right, values)
    if left is None or right is None:
        return None
    if node.op in _ARITHMETIC:
        return _ARITHMETIC[node.op](left, right)
    return None if right == 0 else left / right


def to_column(node: Node, column_of: dict[str, Column]) -> Column:
    """The tree as a Spark column over `column_of` (field name -> column); arithmetic in double."""
    from pyspark.sql import functions as F

    if isinstance(node, Number):
        return F.lit(float(node.value))
    if isinstance(node, Field):
        return column_of[node.name].cast("double")
    if isinstance(node, Negate):
        return -to_column(node.operand, column_of)
    left, right = to_column(node.left, column_of), to_column(node.right, column_of)
    if node.op in _ARITHMETIC:
        return _ARITHMETIC[node.op](left, right)
    return F.when(right == 0, F.lit(None).cast("double")).otherwise(F.try_divide(left, right))


def value_column(store: StoreDefinition, name: str, aggregated: dict[str, Column]) -> Column:
    """A value field's column: its aggregated column, or its derivation over the aggregated columns.
    Every engine (key-value fold, windows, sessions) and every seed and check computes a stored
    value through this one rule."""
    for derived in store.derived:
        if derived.target == name:
            return to_column(parse(derived.expression), aggregated)
    return aggregated[name]
