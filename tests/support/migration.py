"""Shared steps of the migration tests: a store with its declared migration to v2 (player_stats by
default) reading a test's own topic, and the published snapshot's rows."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import yaml

from deltastate.config import Settings
from deltastate.query import Queries

REPO_SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
STORE = "player_stats"


def migration_settings(settings: Settings, schemas: Path, topic: str, store: str = STORE) -> Settings:
    """settings whose schemas are the repository's, with `store` reading `topic`."""
    shutil.copytree(REPO_SCHEMAS, schemas)
    raw = yaml.safe_load((REPO_SCHEMAS / "stores" / f"{store}.yaml").read_text())
    raw["source"]["topic"] = topic
    (schemas / "stores" / f"{store}.yaml").write_text(yaml.safe_dump(raw))
    return dataclasses.replace(settings, schemas_dir=schemas)


def snapshot_rows(settings: Settings, fields) -> dict[str, dict[str, Any]]:
    with Queries(settings) as queries:
        return {r["key"]: {f: r[f] for f in fields} for r in queries.all(STORE).rows}


def approx_v2(state: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Doubles rounded: Spark and the reference sum in a different order."""
    return {k: {f: (round(v, 9) if isinstance(v, float) else v) for f, v in row.items()} for k, row in state.items()}
