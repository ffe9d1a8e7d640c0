"""Every action's report serializes one way (deltastate.report): each report type the actions
return is a frozen dataclass on the shared Report base, and its figures are JSON data equal to their
own JSON round trip (what the driver's report file and XCom carry), with every field present."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import typing
from datetime import UTC, datetime
from pathlib import Path

import pytest

from deltastate.orchestration.actions import ACTION_REPORTS, ACTIONS, figures
from deltastate.report import Report
from deltastate.report import figures as to_figures


def report_type(spec: str) -> type:
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


def sample(tp: object, depth: int = 0) -> object:
    """A value of the annotated type, chosen to exercise the awkward cases: int mapping keys,
    tuples, nested dataclasses, datetimes."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return sample(next(a for a in args if a is not type(None)), depth)
    if origin is typing.Literal:
        return args[0]
    if origin is dict:
        return {3: sample(args[1], depth + 1), 0: sample(args[1], depth + 1)}
    if origin in (tuple, list):
        return (sample(args[0], depth + 1),) if origin is tuple else [sample(args[0], depth + 1)]
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return tp(**{f.name: sample(hints[f.name], depth + 1) for f in dataclasses.fields(tp)})
    return {int: 7, float: 1.25, str: "x", bool: True, typing.Any: {"at": datetime(2026, 1, 2, tzinfo=UTC)},
            object: Path("/tmp/x")}[tp]


def test_every_action_names_its_report_type():
    assert set(ACTION_REPORTS) == set(ACTIONS)


@pytest.mark.parametrize("spec", sorted(set(ACTION_REPORTS.values())))
def test_every_report_type_serializes_through_the_shared_function(spec):
    cls = report_type(spec)
    assert dataclasses.is_dataclass(cls) and issubclass(cls, Report), spec
    assert cls.__dataclass_params__.frozen, f"{spec} is not frozen"
    assert cls.to_dict is Report.to_dict, f"{spec} has its own to_dict"
    report = sample(cls)
    out = figures(report)
    assert out == json.loads(json.dumps(out)), spec  # JSON data as is: the report file and XCom agree
    assert list(out) == [f.name for f in dataclasses.fields(cls)]


def test_figures_rules():
    @dataclasses.dataclass(frozen=True)
    class Inner:
        at: datetime
        where: Path

    @dataclasses.dataclass(frozen=True)
    class Outer(Report):
        offsets: dict[int, int]
        pair: tuple[int, int]
        inner: Inner | None
        ratio: float
        names: frozenset[str]

    report = Outer({2: 10, 0: 5}, (1, 2), Inner(datetime(2026, 3, 4, 5, 6, tzinfo=UTC), Path("/a/b")),
                   math.nan, frozenset({"b", "a"}))
    assert report.to_dict() == {"offsets": {"2": 10, "0": 5}, "pair": [1, 2],
                                "inner": {"at": "2026-03-04T05:06:00+00:00", "where": "/a/b"},
                                "ratio": None, "names": ["a", "b"]}
    assert to_figures(True) is True and to_figures(None) is None


def test_an_action_result_that_is_not_a_report_is_refused():
    with pytest.raises(TypeError, match="dict, not a deltastate.report.Report"):
        figures({"store": "s"})  # type: ignore[arg-type]
