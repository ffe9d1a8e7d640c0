"""The AirflowPlugin: the store pages (FastAPI app + a nav entry framing the list; each store's charts
one click away) and the operator link of DeltastateSparkOperator. Airflow 3 has no operator/hook
registry in plugins; the operator and hook are imported by DAGs from deltastate.orchestration
(re-exported by plugins/deltastate_plugin.py), and the hook appears under its connection type
through the provider's spark connection."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from deltastate.orchestration.hooks import DeltastateSparkHook
from deltastate.orchestration.operators import DeltastateSparkOperator, StorePageLink
from deltastate.orchestration.webapp import create_app

URL_PREFIX = "/deltastate"


class DeltastatePlugin(AirflowPlugin):
    name = "deltastate"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "deltastate stores"}]
    external_views = [{"name": "Deltastate stores", "href": "deltastate/stores", "destination": "nav",
                       "url_route": "deltastate-stores", "category": "browse"}]
    operator_extra_links = [StorePageLink()]
    # Not Airflow registries: listed so `airflow plugins` and readers see what the plugin brings.
    hooks = [DeltastateSparkHook]
    operators = [DeltastateSparkOperator]
