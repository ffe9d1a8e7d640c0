"""Airflow plugin entry: the deltastate store page and operator link; the operator and hook for
DAG authors. Everything lives in deltastate.orchestration."""

from deltastate.orchestration.hooks import DeltastateSparkHook
from deltastate.orchestration.operators import DeltastateSparkOperator
from deltastate.orchestration.plugin import DeltastatePlugin

__all__ = ["DeltastatePlugin", "DeltastateSparkHook", "DeltastateSparkOperator"]
