"""Fixtures of the Spark tests: one local SparkSession for the whole run, the RocketMQ-written
vector stores (read in place, never modified: a test checks every file's sha256 at the end), and a
generated store of 200,000 messages over many commitlog segments, built once per session.

Every DataFrame is compared with what :class:`~rmqstore.MessageStore` answers for the same store
(the helpers that compute those answers, ``store_records``, ``row_of``, ``spark_row``, and the
split sizes ``SPLITS`` live in the kit, tests/kit.py).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

from rmqstore import MessageStoreConfig  # noqa: E402
from tests.kit import VECTOR_SETS, VectorSet, load_vector, vector_changes  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import storegen  # noqa: E402

GENERATED_MESSAGES = 200_000


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/spark/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark():
    from rmqstore.spark.jobs import get_spark

    session = get_spark("local[2]", app_name="rmqstore-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session", params=VECTOR_SETS)
def vector(request) -> VectorSet:
    return load_vector(request.param)


@pytest.fixture(scope="session")
def vectors() -> dict[str, VectorSet]:
    return {n: load_vector(n) for n in VECTOR_SETS}


@pytest.fixture(scope="session", autouse=True)
def vector_stores_stay_unchanged():
    """Every Spark test reads the RocketMQ-written vector stores in place: when the session ends every
    file is still what RocketMQ wrote and nothing was added (a failure shows as this fixture's
    teardown error, whatever order the tests ran in)."""
    yield
    changes = [c for name in VECTOR_SETS for c in vector_changes(load_vector(name))]
    assert changes == [], f"the Spark tests changed RocketMQ's vector stores: {changes}"


@dataclass
class Generated:
    path: str
    config: MessageStoreConfig
    info: dict


@pytest.fixture(scope="session")
def generated(tmp_path_factory) -> Generated:
    path = str(tmp_path_factory.mktemp("gen") / "store")
    cfg = storegen.small_config()
    info = storegen.generate(path, GENERATED_MESSAGES, cfg)
    return Generated(path, cfg, info)
