"""DeltastateSparkOperator: one deltastate action on Spark, submitted with the Spark provider.

The operator builds deltastate's spark-submit (local jar paths, never --packages), runs the
deltastate CLI's `job` command as the driver (deltastate/cli/__main__.py), streams the driver's output into the task log,
and returns the driver's figures as XCom. A run of a store takes the checkpoint's writer lock in
the driver (deltastate.engine.common.writer_lock), so a retry can never add a second writer.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator, BaseOperatorLink

from deltastate.errors import DeltastateError
from deltastate.orchestration.hooks import DEFAULT_CONN_ID

SPARK_JOB = Path(__file__).parents[1] / "cli" / "__main__.py"
# "submit" (default): spark-submit through the Spark provider, to the connection's master.
# "inline": the action runs in the task's own process on its Spark session (a warm local session
# for dag.test() runs in tests and notebooks; the worker then is the Spark driver).
# "resident": the action runs in the home's resident driver (`deltastate driver start`), whose JVM
# and compiled code outlive each task; its output streams into the task log.
DEPLOY_ENV = "DELTASTATE_SPARK_DEPLOY"


def _given(value: Any) -> bool:
    """A templated parameter that was set (Jinja renders a missing one as '' or 'None')."""
    return value not in (None, "", "None")


class SparkActionError(DeltastateError):
    def __init__(self, action: str, store: str, figures: dict[str, Any]) -> None:
        super().__init__(f"store {store!r}: {action} failed: {figures.get('error', 'spark-submit failed')}\n"
                         f"{json.dumps(figures, indent=2, default=str, sort_keys=True)}")
        self.figures = figures


class StorePageLink(BaseOperatorLink):
    """A button on the task: the plugin's store page, anchored at the task's store."""

    name = "deltastate store"

    def get_link(self, operator: BaseOperator, *, ti_key: Any) -> str:
        return f"/deltastate/stores#{getattr(operator, 'store', '')}"


class DeltastateSparkOperator(BaseOperator):
    """Run ACTION (run | compact | cleanup | restore | publish | migrate_<step>) for STORE with spark-submit."""

    template_fields: Sequence[str] = ("store", "topic", "max_offsets_per_trigger", "to_version", "hold_seconds")
    operator_extra_links = (StorePageLink(),)
    ui_color = "#f4a460"

    def __init__(self, *, action: str, store: str, topic: str | None = None,
                 max_offsets_per_trigger: int | str | None = None, conn_id: str = DEFAULT_CONN_ID,
                 to_version: int | str | None = None, hold_seconds: float | str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.action = action
        self.store = store
        self.topic = topic
        self.max_offsets_per_trigger = max_offsets_per_trigger
        self.conn_id = conn_id
        self.to_version = to_version
        self.hold_seconds = hold_seconds
        self._hook = None

    def _args(self, report: Path) -> list[str]:
        args = ["job", self.action, self.store, "--report", str(report)]
        if self.topic not in (None, "", "None"):
            args += ["--topic", str(self.topic)]
        if self.max_offsets_per_trigger not in (None, "", "None"):
            args += ["--max-offsets-per-trigger", str(int(self.max_offsets_per_trigger))]
        if _given(self.to_version):
            args += ["--to-version", str(int(self.to_version))]  # type: ignore[arg-type]
        if _given(self.hold_seconds):
            args += ["--hold-seconds", str(float(self.hold_seconds))]  # type: ignore[arg-type]
        return args

    def execute(self, context: Any) -> dict[str, Any]:
        from deltastate.config import load_settings
        from deltastate.orchestration.hooks import DeltastateSparkHook, driver_env, submit_conf

        settings = load_settings()
        deploy = os.environ.get(DEPLOY_ENV, "submit")
        if deploy == "inline":
            return self._execute_inline(settings)
        name = f"deltastate-{self.action}-{self.store}".replace("*", "all")
        run_id = re.sub(r"[^A-Za-z0-9_.-]", "_", str(context.get("run_id", "manual")))
        report = settings.home / "reports" / f"{name}-{run_id}-{uuid.uuid4().hex[:8]}.json"
        if deploy == "resident":
            return self._execute_resident(settings, report)
        self._hook = hook = DeltastateSparkHook(settings, conn_id=self.conn_id, conf=submit_conf(settings, name),
                                                name=name, application_args=self._args(report))
        hook._env_vars = driver_env(settings, hook.master)  # set after resolving, so the driver gets the real master
        self.log.info("submitting %s for store %s to %s", self.action, self.store, hook.master)
        submit_error: Exception | None = None
        try:
            hook.submit(str(SPARK_JOB))
        except Exception as exc:  # the report, when written, says more than the exit code
            submit_error = exc
        figures = json.loads(report.read_text()) if report.is_file() else {}
        if submit_error is not None or "error" in figures:
            figures.setdefault("error", str(submit_error))
            raise SparkActionError(self.action, self.store, figures)
        self.log.info("%s %s figures: %s", self.action, self.store, json.dumps(figures, sort_keys=True, default=str))
        return figures

    def _execute_resident(self, settings, report: Path) -> dict[str, Any]:
        from deltastate.driver import client

        def to_log(_kind: str, text: str) -> None:
            for line in text.splitlines():
                self.log.info("%s", line)

        self.log.info("sending %s for store %s to the resident driver of %s", self.action, self.store, settings.home)
        code = client.send_command(settings, self._args(report), to_log)
        if code is None:
            raise SparkActionError(self.action, self.store, {
                "error": f"no resident driver serves {settings.home} with this worker's settings and code; start "
                         f"one with `deltastate driver start` under the worker's environment ({DEPLOY_ENV}=resident)"})
        figures = json.loads(report.read_text()) if report.is_file() else {}
        if code != 0 or "error" in figures:
            figures.setdefault("error", f"`deltastate job` exited with status {code}")
            raise SparkActionError(self.action, self.store, figures)
        self.log.info("%s %s figures: %s", self.action, self.store, json.dumps(figures, sort_keys=True, default=str))
        return figures

    def _execute_inline(self, settings) -> dict[str, Any]:
        from deltastate.orchestration.actions import perform

        self.log.info("running %s for store %s in this process (%s=inline)", self.action, self.store, DEPLOY_ENV)
        topic = None if self.topic in (None, "", "None") else str(self.topic)
        limit = None if self.max_offsets_per_trigger in (None, "", "None") else int(self.max_offsets_per_trigger)
        version = int(self.to_version) if _given(self.to_version) else None  # type: ignore[arg-type]
        hold = float(self.hold_seconds) if _given(self.hold_seconds) else None  # type: ignore[arg-type]
        try:
            figures = {"action": self.action, "store": self.store,
                       **perform(settings, self.action, self.store, topic, limit, version, hold)}
        except Exception as exc:
            detail = getattr(exc, "report", None)
            figures = {"error": f"{type(exc).__name__}: {exc}",
                       **({"validation": detail.to_dict()} if detail is not None else {})}
            raise SparkActionError(self.action, self.store, figures) from exc
        self.log.info("%s %s figures: %s", self.action, self.store, json.dumps(figures, sort_keys=True, default=str))
        return figures

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()
