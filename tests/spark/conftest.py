"""Fixtures of the Spark tests: one local SparkSession for the whole run, the RocketMQ-written
vector stores (read in place, never modified: a test checks every file's sha256 at the end), and a
generated store of 200,000 messages over many commitlog segments, built once per session.

Every DataFrame is compared with what :class:`~rmqstore.MessageStore` answers for the same store.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

from rmqstore import MessageStore, MessageStoreConfig  # noqa: E402
from rmqstore.engine.dispatch import iter_record_batches  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import storegen  # noqa: E402

VECTORS = Path(os.environ.get("RMQSTORE_VECTORS", Path(__file__).resolve().parents[3] / "shared" / "vectors"))
VECTOR_SETS = ("basic", "propcrc", "rollover")
GENERATED_MESSAGES = 200_000
#: split sizes that cut each vector store into a few dozen partitions, several inside a segment
#: (every partition is a Spark task, ~50 ms each; resync at many more split sizes: test_scan.py)
SPLITS = {"basic": 1500, "propcrc": 700, "rollover": 40_000}


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


@dataclass
class VectorSet:
    name: str
    store: str
    config: MessageStoreConfig
    expected: dict

    def messages(self) -> list[dict]:
        return self.expected["raw"]["messages"]


def load_vector(name: str) -> VectorSet:
    d = VECTORS / name
    if not d.is_dir():
        pytest.skip(f"reference vectors not found at {d}")
    inp = json.loads((d / "input.json").read_text())
    exp_path = d / "expected.json"
    expected = json.loads(exp_path.read_text()) if exp_path.exists() else \
        json.loads(gzip.decompress((d / "expected.json.gz").read_bytes()))
    return VectorSet(name, str(d / "store"), MessageStoreConfig.from_properties(inp["config"]), expected)


@pytest.fixture(scope="session", params=VECTOR_SETS)
def vector(request) -> VectorSet:
    return load_vector(request.param)


@pytest.fixture(scope="session")
def vectors() -> dict[str, VectorSet]:
    return {n: load_vector(n) for n in VECTOR_SETS}


def vector_changes(vs: VectorSet) -> list[str]:
    """How the files of a vector store differ from what RocketMQ wrote (expected.json ``raw.files``:
    path, size, sha256; index files, named by creation time, compared by content): empty if they do not."""
    want = {f["path"]: (f["size"], f["sha256"]) for f in vs.expected["raw"]["files"]}
    got = {}
    for dp, _, files in os.walk(vs.store):
        for n in files:
            p = os.path.join(dp, n)
            with open(p, "rb") as fh:
                data = fh.read()
            got[os.path.relpath(p, vs.store)] = (len(data), hashlib.sha256(data).hexdigest())
    out = []
    if sorted(v for k, v in got.items() if k.startswith("index/")) != \
            sorted(v for k, v in want.items() if k.startswith("index/")):
        out.append(f"{vs.name}: index/ differs")
    others_got = {k: v for k, v in got.items() if not k.startswith("index/")}
    others_want = {k: v for k, v in want.items() if not k.startswith("index/")}
    out += [f"{vs.name}: {k} {'added' if k not in others_want else 'missing' if k not in others_got else 'changed'}"
            for k in sorted(set(others_got) | set(others_want)) if others_got.get(k) != others_want.get(k)]
    return out


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


# ------------------------------------------------------------------------------------------------
# MessageStore answers
# ------------------------------------------------------------------------------------------------

def record_offsets(st: MessageStore) -> list[int]:
    """Commitlog offsets of every record the store holds, in order (the store's own iterator)."""
    cl = st.commit_log
    out: list[int] = []
    for mf, batch in iter_record_batches(cl.queue, cl.min_offset, cl.confirm_offset):
        out.extend((batch.starts + mf.file_from_offset).tolist())
    return out


def store_records(path: str, cfg: MessageStoreConfig) -> list:
    """Every record, fully decoded by MessageStore (``look_message_by_offset``)."""
    with MessageStore.open(path, cfg, read_only=True) as st:
        return [st.look_message_by_offset(p) for p in record_offsets(st)]


def row_of(rec, store: str | None = None) -> dict:
    """A MessageRecord in the data source's column names and Python types (with ``brokerName``, the
    store directory's name, when ``store`` is given: a row of the data source)."""
    from datetime import datetime

    def ts(ms: int):  # as pyspark turns a TIMESTAMP into a (local, naive) datetime
        us = ms * 1000
        return datetime.fromtimestamp(us // 1_000_000).replace(microsecond=us % 1_000_000)

    return {
        "topic": rec.topic, "queueId": rec.queue_id, "queueOffset": rec.queue_offset,
        "commitLogOffset": rec.phy_offset, "storeSize": rec.store_size, "body": rec.body, "tags": rec.tags,
        "keys": rec.keys, "uniqKey": rec.uniq_key, "msgId": rec.msg_id, "properties": rec.properties,
        "bornTimestamp": ts(rec.born_timestamp), "storeTimestamp": ts(rec.store_timestamp),
        "bornHost": rec.born_host, "storeHost": rec.store_host, "flag": rec.flag, "sysFlag": rec.sys_flag,
        "reconsumeTimes": rec.reconsume_times, "preparedTransactionOffset": rec.prepared_transaction_offset,
        "bodyCRC": rec.body_crc, **({"brokerName": os.path.basename(os.path.normpath(store))} if store else {}),
    }


def spark_row(r) -> dict:
    d = r.asDict(recursive=True)
    if "body" in d and d["body"] is not None:
        d["body"] = bytes(d["body"])
    if "properties" in d:
        d["properties"] = dict(d["properties"])
    return d
