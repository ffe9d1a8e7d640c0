"""DELTASTATE_SHUFFLE_PARTITIONS: a positive whole number, by default one per task slot of a local
master (a batch's stateful stage in one wave) and 4 for a cluster's; anything else is refused by name."""

import os

import pytest

from deltastate.config import load_settings, local_cores
from deltastate.errors import ConfigError


@pytest.mark.parametrize(("master", "cores"), [
    ("local", 1), ("local[3]", 3), ("local[1]", 1), ("local[8,2]", 8), ("local[*]", os.cpu_count()),
    ("local[*,3]", os.cpu_count()), (" local[2] ", 2), ("spark://master:7077", None), ("yarn", None),
    ("local-cluster[2,1,1024]", None), ("k8s://https://h:443", None)])
def test_a_local_master_gives_its_task_slots(master: str, cores: int | None) -> None:
    assert local_cores(master) == cores


@pytest.mark.parametrize(("env", "partitions"), [
    ({"SPARK_MASTER": "local[3]"}, 3), ({"SPARK_MASTER": "local"}, 1), ({}, os.cpu_count()),
    ({"SPARK_MASTER": "spark://master:7077"}, 4),
    ({"SPARK_MASTER": "local[3]", "DELTASTATE_SHUFFLE_PARTITIONS": "7"}, 7),
    ({"DELTASTATE_SHUFFLE_PARTITIONS": " "}, os.cpu_count())])
def test_the_default_follows_the_master_and_a_setting_wins(env: dict[str, str], partitions: int) -> None:
    assert load_settings(env).shuffle_partitions == partitions


@pytest.mark.parametrize("text", ["0", "-2", "four", "2.5"])
def test_anything_but_a_positive_number_is_refused_by_name(text: str) -> None:
    with pytest.raises(ConfigError, match=f"DELTASTATE_SHUFFLE_PARTITIONS must be a whole number >= 1, not '{text}'"):
        load_settings({"DELTASTATE_SHUFFLE_PARTITIONS": text})
