"""Turns pydantic's validation errors on a definition file into lines an operator can act on: the key
path as written in the YAML, what is wrong, the value given and, for an unknown key, the keys allowed
at that place."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError


def explain(error: ValidationError, root: type[BaseModel]) -> str:
    lines = []
    for item in error.errors():
        loc = [str(part) for part in item["loc"]]
        path, model = _walk(root, loc[:-1]) if loc else ([], root)
        if loc:
            path.append(loc[-1])
        where = ".".join(path) or "(top level)"
        kind = item["type"]
        if kind == "extra_forbidden":
            allowed = ", ".join(_keys(model)) if model is not None else "none"
            lines.append(f"  {where}: unknown key; allowed here: {allowed}")
        elif kind == "missing":
            lines.append(f"  {where}: required key is missing")
        else:
            message = item["msg"].removeprefix("Value error, ")
            given = item.get("input")
            shown = "" if isinstance(given, dict) else f" (got {given!r})"
            lines.append(f"  {where}: {message}{shown}")
    return "\n".join(lines)


def _keys(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


def _walk(root: type[BaseModel], loc: list[str]) -> tuple[list[str], type[BaseModel] | None]:
    """The YAML path of `loc` (union member tags dropped) and the model found at its end."""
    path: list[str] = []
    current: Any = root
    pending_mapping = False
    for part in loc:
        if pending_mapping:  # a key of a mapping of models (aggregations: {name: {...}})
            path.append(part)
            pending_mapping = False
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            path.append(part)
            continue
        field = _field(current, part)
        if field is None:  # a union member tag such as 'FieldTombstoneModel'
            continue
        path.append(part)
        current, pending_mapping = _inner_model(field.annotation)
    model = current if isinstance(current, type) and issubclass(current, BaseModel) else None
    return path, model


def _field(model: type[BaseModel], key: str):
    for name, field in model.model_fields.items():
        if key in (name, field.alias):
            return field
    return None


def _inner_model(annotation: Any) -> tuple[Any, bool]:
    """The model a field's annotation holds (through Optional, unions and dict values)."""
    origin = typing.get_origin(annotation)
    if origin is dict:
        inner, _ = _inner_model(typing.get_args(annotation)[1])
        return inner, True
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            inner, mapping = _inner_model(arg)
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner, mapping
        return None, False
    return annotation, False
