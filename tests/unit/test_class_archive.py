"""Which class archive a Spark process maps: one per JVM and exact classpath, none when it is missing
or turned off."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deltastate.config import load_settings
from deltastate.infra import class_archive


@pytest.fixture()
def settings(tmp_path: Path):
    return load_settings({"DELTASTATE_HOME": str(tmp_path / "home")})


def test_a_changed_jar_names_another_archive(settings, tmp_path: Path) -> None:
    jar = tmp_path / "extra.jar"
    jar.write_bytes(b"one")
    before = class_archive.archive_path(settings, [str(jar)])
    assert before is not None and before.parent == settings.jars_dir / "class-archive"
    assert class_archive.archive_path(settings, [str(jar)]) == before
    jar.write_bytes(b"three")  # another size: another classpath as far as the JVM is concerned
    assert class_archive.archive_path(settings, [str(jar)]) != before
    os.utime(jar, ns=(1, 1))
    moved = class_archive.archive_path(settings, [str(jar)])
    assert moved not in (before, None)


def test_options_only_for_an_archive_that_exists(settings, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(class_archive.DISABLE_ENV, raising=False)
    jars = [str(tmp_path / "a.jar")]
    assert class_archive.archive_options(settings, jars) == []
    path = class_archive.archive_path(settings, jars)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    assert class_archive.archive_options(settings, jars) == [f"-XX:SharedArchiveFile={path}", *class_archive.QUIET]
    monkeypatch.setenv(class_archive.DISABLE_ENV, "0")
    assert class_archive.archive_options(settings, jars) == []
