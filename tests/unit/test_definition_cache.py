"""The cache of checked store definitions (stores/loader.py): a load from the cache equals a load
from the files; any change to the store file or a schema it could read is checked again; a file that
fails its checks is refused on every load, never served from an older entry; and a process that loads
a cached definition imports neither pydantic nor PyYAML."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deltastate.config import PROJECT_ROOT, Settings, load_settings
from deltastate.errors import StoreDefinitionError
from deltastate.stores.loader import load_store
from deltastate.stores.parse import parse_store

SCHEMAS = PROJECT_ROOT / "schemas"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    schemas = tmp_path / "schemas"
    shutil.copytree(SCHEMAS, schemas)
    return load_settings({"DELTASTATE_HOME": str(tmp_path / "home"), "DELTASTATE_SCHEMAS": str(schemas),
                          "DELTASTATE_STORAGE": str(tmp_path / "data")})


def entries(settings: Settings) -> list[Path]:
    return sorted((settings.home / "cache" / "stores").rglob("*.pickle"))


def test_a_cached_load_equals_a_load_from_the_files(settings: Settings) -> None:
    for name in ("player_stats", "trade_stats", "user_sessions"):
        first = load_store(settings, name)
        again = load_store(settings, name)
        from_files = parse_store(settings.schemas_dir, name, settings.schemas_dir / "stores" / f"{name}.yaml")
        assert first == again == from_files
        assert again.source.event_schema == from_files.source.event_schema  # compare=False on the dataclass
        assert again.state == from_files.state
    assert len(entries(settings)) == 3


def test_a_changed_store_file_is_checked_again(settings: Settings) -> None:
    path = settings.schemas_dir / "stores" / "player_stats.yaml"
    assert load_store(settings, "player_stats").description != "changed"
    text = path.read_text()
    # The same length as before: a stamp on size (or a coarse mtime) would not see it.
    old_description = load_store(settings, "player_stats").description
    assert old_description and old_description in text
    path.write_text(text.replace(old_description, "x" * len(old_description), 1))
    assert load_store(settings, "player_stats").description == "x" * len(old_description)


def test_a_changed_event_schema_is_checked_again(settings: Settings) -> None:
    store = load_store(settings, "player_stats")
    schema_file = settings.schemas_dir / "events" / f"{store.source.event_schema_name}.json"
    schema = json.loads(schema_file.read_text())
    schema["properties"][store.key_field]["type"] = "integer"
    schema_file.write_text(json.dumps(schema))
    with pytest.raises(StoreDefinitionError, match="must be a string property"):
        load_store(settings, "player_stats")


def test_a_file_that_fails_its_checks_is_refused_on_every_load(settings: Settings) -> None:
    path = settings.schemas_dir / "stores" / "player_stats.yaml"
    good = path.read_text()
    load_store(settings, "player_stats")
    path.write_text(good + "retenion: 1h\n")
    for _ in range(2):
        with pytest.raises(StoreDefinitionError, match="retenion: unknown key"):
            load_store(settings, "player_stats")
    path.write_text(good)
    assert load_store(settings, "player_stats").name == "player_stats"


def test_an_unreadable_entry_is_a_miss(settings: Settings) -> None:
    expected = load_store(settings, "player_stats")
    [entry] = entries(settings)
    entry.write_bytes(b"not a pickle")
    assert load_store(settings, "player_stats") == expected


def test_a_cached_load_imports_neither_pydantic_nor_yaml(settings: Settings) -> None:
    load_store(settings, "player_stats")
    probe = (
        "import json, sys\n"
        "from deltastate.config import load_settings\n"
        "from deltastate.stores import load_store\n"
        "load_store(load_settings(), 'player_stats')\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True,
                          env={"PATH": "/usr/bin:/bin", **settings.to_env()})
    loaded = set(json.loads(done.stdout))
    assert "deltastate" in loaded
    assert not loaded & {"pydantic", "pydantic_core", "yaml"}, sorted(loaded & {"pydantic", "yaml"})
