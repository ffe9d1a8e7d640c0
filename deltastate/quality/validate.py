"""Runs a suite over a pandas frame with great-expectations 1.x and writes Data Docs.

The GX project is a file context under DELTASTATE_HOME/quality/gx, so every validation of every
store lands in one Data Docs site: DELTASTATE_HOME/quality/gx/uncommitted/data_docs/local_site/
index.html. great_expectations is imported lazily: it takes seconds, and DAG parsing, the CLI and
the query path must not pay for it.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deltastate.config import Settings
from deltastate.quality.suites import Expectation, expand, load_spec
from deltastate.report import Report
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:
    import pandas as pd

DATASOURCE = "deltastate"


def quality_root(settings: Settings) -> Path:
    return settings.home / "quality"


def data_docs_index(settings: Settings) -> Path:
    return quality_root(settings) / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"


@dataclass(frozen=True)
class Failure:
    expectation: str
    column: str | None
    observed: Any


@dataclass(frozen=True)
class ValidationReport(Report):
    suite: str
    store: str
    success: bool
    evaluated: int
    failures: tuple[Failure, ...] = field(default_factory=tuple)
    rows: int = 0
    data_docs: str = ""


def _quiet_gx() -> None:
    # GX logs one info line per decorated function on import and draws progress bars per metric.
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    # The changelog suite's string row condition ("op == 'put'") warns once per metric in GX 1.9+.
    warnings.filterwarnings("ignore", message=r".*(condition_parser|row_condition).*", category=DeprecationWarning)


def _context(settings: Settings):
    import great_expectations as gx

    root = quality_root(settings)
    root.mkdir(parents=True, exist_ok=True)
    context = gx.get_context(mode="file", project_root_dir=str(root))
    # Progress bars would flood the Airflow task log; they are on by default.
    context.variables.progress_bars = {"globally": False}
    return context


def _batch_definition(context, name: str):
    source = context.data_sources.add_or_update_pandas(DATASOURCE)
    try:
        asset = source.get_asset(name)
    except LookupError:
        asset = source.add_dataframe_asset(name)
    try:
        return asset.get_batch_definition("whole")
    except (KeyError, LookupError):
        return asset.add_batch_definition_whole_dataframe("whole")


def _observed(result: dict[str, Any]) -> Any:
    if "observed_value" in result:
        return result["observed_value"]
    keep = ("unexpected_count", "element_count", "partial_unexpected_list")
    return {k: result[k] for k in keep if k in result}


def run_expectations(settings: Settings, suite: str, store: str, expectations: list[Expectation],
                     frame: pd.DataFrame) -> ValidationReport:
    """Validate frame against expectations as GX suite '<suite>.<store>', updating Data Docs."""
    _quiet_gx()
    import great_expectations as gx
    from great_expectations.checkpoint import UpdateDataDocsAction
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    name = f"{suite}.{store}"
    context = _context(settings)
    gx_suite = gx.ExpectationSuite(name=name)
    for exp in expectations:
        gx_suite.add_expectation_configuration(ExpectationConfiguration(type=exp.type, kwargs=exp.kwargs))
    gx_suite = context.suites.add_or_update(gx_suite)
    definition = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=name, data=_batch_definition(context, name), suite=gx_suite))
    checkpoint = context.checkpoints.add_or_update(gx.Checkpoint(
        name=name, validation_definitions=[definition], result_format="SUMMARY",
        actions=[UpdateDataDocsAction(name="data_docs")]))
    outcome = checkpoint.run(batch_parameters={"dataframe": frame})
    [described] = outcome.describe_dict()["validation_results"]
    failures = tuple(
        Failure(e["expectation_type"], e["kwargs"].get("column") or e["kwargs"].get("column_list")
                and ",".join(e["kwargs"]["column_list"]), _observed(e.get("result", {})))
        for e in described["expectations"] if not e["success"])
    return ValidationReport(suite=suite, store=store, success=bool(outcome.success),
                            evaluated=int(described["statistics"]["evaluated_expectations"]),
                            failures=failures, rows=len(frame), data_docs=str(data_docs_index(settings)))


def validate(settings: Settings, suite: str, store: StoreDefinition, frame: pd.DataFrame,
             values: dict[str, Any] | None = None) -> ValidationReport:
    """Validate frame with the store's expansion of schemas/quality/<suite>.json."""
    return run_expectations(settings, suite, store.name, expand(load_spec(settings, suite), store, values), frame)
