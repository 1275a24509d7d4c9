"""`rmqstore spark rebuild|verify|export|stats` and `rmqstore demo` with its Spark step: one test
each, in-process (they share one local SparkSession), on the small `basic` vector store."""
from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.spark

MASTER = "local[2]"


@pytest.fixture(scope="module", autouse=True)
def _spark_available():
    pytest.importorskip("pyspark")
    if not any(os.access(os.path.join(p, "java"), os.X_OK) for p in os.environ.get("PATH", "").split(os.pathsep)) \
            and not os.environ.get("JAVA_HOME"):
        pytest.skip("Java is needed for Spark")


def test_spark_rebuild(run, vectors, tmp_path):
    vs = vectors.load("basic")
    got = run.json("spark", "rebuild", tmp_path / "out", "--store", vs.store, "--master", MASTER)
    assert got["records"] == len(vs.expected["putResults"])
    assert got["end_offset"] == vs.expected["api"]["maxPhyOffset"]
    assert got["consume_queues"] == sum(len(q) for q in vs.expected["api"]["consumeQueues"].values())
    assert vectors.tree_hashes(tmp_path / "out" / "consumequeue") == vectors.tree_hashes(vs.store / "consumequeue")
    ours = sorted(os.listdir(tmp_path / "out" / "index"))
    theirs = sorted(os.listdir(vs.store / "index"))
    assert got["index_files"] == len(theirs) == len(ours)
    for a, b in zip(theirs, ours):  # by position: index file names are creation times
        assert (vs.store / "index" / a).read_bytes() == (tmp_path / "out" / "index" / b).read_bytes()
    # the same output directory again: refused (before any Spark work) with the I/O exit code
    before = vectors.tree_hashes(tmp_path / "out")
    assert "already holds" in run.fails(9, "spark", "rebuild", tmp_path / "out", "--store", vs.store,
                                        "--master", MASTER).stderr
    assert vectors.tree_hashes(tmp_path / "out") == before
