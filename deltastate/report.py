"""One way every report becomes figures: a JSON-safe dict.

The actions Airflow runs (run, compact, cleanup, restore, publish, the migration steps) return
frozen dataclasses; the CLI prints them, the Spark driver writes them to its report file and the
operator returns them as XCom, which only carries JSON. `Report.to_dict` (and `figures` for any
value) turns a report into plain dicts, lists, strings, numbers, booleans and None, the same way for
every report, so a new report type cannot need its own serializer.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from datetime import date, datetime, time, timedelta
from pathlib import PurePath
from typing import Any


def figures(value: Any) -> Any:
    """value as JSON-safe data: dataclasses become dicts of their fields (nested ones too), mapping
    keys become strings (JSON object keys are strings; XCom would turn 0 into "0" anyway, and one
    rule here keeps an in-process report equal to its round trip), tuples and sets become lists,
    dates ISO 8601 text, timedeltas seconds, paths and anything else their text. A non-finite float
    becomes None: JSON has no NaN."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, enum.Enum):
        return figures(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: figures(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): figures(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [figures(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return [figures(v) for v in sorted(value, key=str)]
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, PurePath):
        return str(value)
    return str(value)


class Report:
    """Mixin for report dataclasses: `to_dict()` is `figures(self)`."""

    def to_dict(self) -> dict[str, Any]:
        return figures(self)
