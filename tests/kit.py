"""The test kit: the helpers every test folder shares, in one module.

Import what you need (``from tests.kit import cfg, msg``); pytest's ``--import-mode=importlib``
(pyproject) makes the ``tests`` folder importable as a namespace package, whatever the working
directory. Fixtures that hand these helpers out (``make_config``, ``vectors``, ``open_store``) live
in ``tests/conftest.py`` and are thin wrappers over this module.

What lives here:

* :func:`cfg`: a :class:`MessageStoreConfig` with small segments (rolls after a handful of
  messages), plus the overrides a test module needs.
* :func:`msg`: one message, plain (exactly the given properties) or numbered the way a producer
  builds it (tags, keys, a UNIQ_KEY).
* CommitLog records: :func:`record_fields` (unstamped, for the encoders) and :func:`record` (the
  bytes of a stamped one), over the hosts of :data:`HOSTS`.
* the reference vectors: :func:`load_vector` gives a cached :class:`VectorSet` (input.json,
  expected.json[.gz], config, store directory) that the unit, compat, CLI and Spark tests all use;
  :func:`body_of`, :func:`message_from_input`, :func:`vector_changes`; :func:`stored_record` (the
  bytes RocketMQ wrote for one record).
* store answers in the Spark data source's shape: :func:`store_records`, :func:`row_of`,
  :func:`spark_row`, :data:`SPLITS`.
* files: :func:`tree_hashes`, :func:`tree_bytes`, :func:`segment_of`, :func:`patch_file`;
  :func:`open_inferred`; :func:`free_port`; :func:`fill_queue` (puts into one queue of a store).

The reference vectors live outside the repository (``../shared/vectors`` next to the checkout, as
ARCHITECTURE.md lays out); ``RMQSTORE_VECTORS`` points elsewhere.
"""
from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import json
import os
import signal
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from rmqstore import Message, MessageStore, MessageStoreConfig
from rmqstore.format.encode import RecordFields, encode_record
from rmqstore.format.msgid import parse_host
from rmqstore.format.record_layout import host_sys_flag
from rmqstore.layout import infer_config

VECTOR_SETS = ("basic", "propcrc", "rollover")

# ------------------------------------------------------------------------------------------------
# Configurations and messages
# ------------------------------------------------------------------------------------------------

#: the small geometry most tests use: a 4 KiB commitlog segment, 50 consume-queue units per file,
#: 64 index slots and 256 index entries per index file
SMALL = dict(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=1000,
             max_hash_slot_num=64, max_index_num=256)


def cfg(*bases: Mapping, **overrides) -> MessageStoreConfig:
    """A configuration: :data:`SMALL`, then each mapping of ``bases`` (a test module's own
    geometry), then ``overrides``; every other field keeps its default."""
    fields = dict(SMALL)
    for b in bases:
        fields.update(b)
    fields.update(overrides)
    return MessageStoreConfig(**fields)


def msg(topic: str = "T", body: bytes = b"b", props=None, *, i: int | None = None, tags: str | None = None,
        keys=None, queues: int = 1, **fields) -> Message:
    """One message.

    Plain (no ``i``, ``tags`` or ``keys``): ``Message(topic, body, properties=props, **fields)``,
    exactly the given properties and no UNIQ_KEY, so record lengths are predictable.

    Numbered (``i`` given) or with ``tags``/``keys``: built as a producer builds it
    (:meth:`Message.create`: TAGS, KEYS and a new UNIQ_KEY unless ``uniq_key`` is given; ``props``
    are added). With ``i`` the keys default to ``[f"k{i}"]`` and ``queue_id`` to ``i % queues``.
    Fields that ``Message.create`` does not take (``store_timestamp``, ``sys_flag``, ...) are set
    on the message afterwards."""
    if i is None and tags is None and keys is None:
        return Message(topic=topic, body=body, properties=props, **fields)
    if i is not None:
        keys = [f"k{i}"] if keys is None else keys
        fields.setdefault("queue_id", i % queues)
    create = {k: fields.pop(k) for k in ("queue_id", "flag", "born_host", "born_timestamp", "uniq_key")
              if k in fields}
    m = Message.create(topic, body, tags=tags, keys=keys, properties=props, **create)
    for k, v in fields.items():
        setattr(m, k, v)
    return m


# ------------------------------------------------------------------------------------------------
# CommitLog records, encoded (the format tests' inputs)
# ------------------------------------------------------------------------------------------------

#: raw hosts (address + i32 port) of the record helpers
HOST_V4, HOST_V6 = parse_host("192.168.0.10:50000"), parse_host("[2001:db8::1]:40000")
#: (born host is V6, store host is V6) -> the raw born and store hosts
HOSTS = {(False, False): (HOST_V4, HOST_V4), (True, False): (HOST_V6, HOST_V4),
         (False, True): (HOST_V4, HOST_V6), (True, True): (HOST_V6, HOST_V6)}


def record_fields(born_v6: bool = False, store_v6: bool = False, **kw) -> RecordFields:
    """The fields of one unstamped record (topic TopicTest, body ``hello``, TAGS=TagA, the hosts'
    V6 sysflag bits set), ``kw`` overriding any field."""
    born, store = HOSTS[(born_v6, store_v6)]
    base = dict(topic=b"TopicTest", body=b"hello", props=b"TAGS\x01TagA\x02", queue_id=3, flag=7,
                sys_flag=host_sys_flag(0, len(born), len(store)), born_timestamp=1_700_000_000_001, born_host=born,
                store_timestamp=0, store_host=store, reconsume_times=2, prepared_transaction_offset=5, v2=False)
    base.update(kw)
    return RecordFields(**base)


def record(*, topic=b"TopicTest", body=b"hello", props=b"TAGS\x01TagA\x02", queue_id=3, flag=7, sys_flag=0,
           born_timestamp=1_700_000_000_001, born_host=HOST_V4, store_timestamp=1_700_000_000_123,
           store_host=parse_host("10.0.0.1:10911"), reconsume_times=2, prepared_transaction_offset=0, v2=False,
           queue_offset=11, phy_offset=4096) -> bytearray:
    """One stamped record's bytes (queue offset 11 at phy 4096 by default); a 20-byte host sets its
    V6 sysflag bit."""
    sys_flag |= host_sys_flag(0, len(born_host), len(store_host))
    return encode_record(topic=topic, body=body, props=props, queue_id=queue_id, flag=flag, sys_flag=sys_flag,
                         born_timestamp=born_timestamp, born_host=born_host, store_timestamp=store_timestamp,
                         store_host=store_host, reconsume_times=reconsume_times,
                         prepared_transaction_offset=prepared_transaction_offset, v2=v2,
                         queue_offset=queue_offset, phy_offset=phy_offset)


# ------------------------------------------------------------------------------------------------
# Reference vectors
# ------------------------------------------------------------------------------------------------

def vectors_root() -> Path:
    env = os.environ.get("RMQSTORE_VECTORS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "vectors"


@dataclass(frozen=True)
class VectorSet:
    """One reference vector set: what was put (``input``) and what RocketMQ wrote (``expected``)."""

    name: str
    root: Path
    input: dict
    expected: dict

    @property
    def store(self) -> Path:
        """The store directory RocketMQ wrote (shared by every run: never write to it)."""
        return self.root / "store"

    @property
    def path(self) -> str:
        """:attr:`store` as the ``str`` the Spark data source and its jobs take."""
        return str(self.store)

    @property
    def config(self) -> MessageStoreConfig:
        return MessageStoreConfig.from_properties(self.input["config"])

    def messages(self) -> list[dict]:
        """The records RocketMQ wrote (``expected.json`` ``raw.messages``), in commitlog order."""
        return self.expected["raw"]["messages"]

    @property
    def messages_by_phy(self) -> dict[int, dict]:
        return {m["phyOffset"]: m for m in self.messages()}


@functools.lru_cache(maxsize=None)
def load_vector(name: str) -> VectorSet:
    """The vector set ``name`` (cached; the test is skipped when the vectors are not there)."""
    root = vectors_root() / name
    if not root.is_dir():
        pytest.skip(f"reference vectors not found at {root} (set RMQSTORE_VECTORS)")
    with open(root / "input.json", encoding="utf-8") as fh:
        inp = json.load(fh)
    exp_path = root / "expected.json"
    if exp_path.exists():
        with open(exp_path, encoding="utf-8") as fh:
            exp = json.load(fh)
    else:
        with gzip.open(str(exp_path) + ".gz", "rt", encoding="utf-8") as fh:
            exp = json.load(fh)
    return VectorSet(name, root, inp, exp)


def stored_record(vs: VectorSet, m: dict) -> bytes:
    """The bytes RocketMQ wrote for the record ``m`` of ``vs.messages()`` (its commitlog segment,
    ``storeSize`` bytes from ``phyOffset``)."""
    path, pos = segment_of(vs.store, m["phyOffset"], vs.config.mapped_file_size_commit_log)
    with open(path, "rb") as fh:
        fh.seek(pos)
        return fh.read(m["storeSize"])


def body_of(m: dict) -> bytes:
    """Body of an input.json message (``text``, ``base64`` or ``repeat``/``count``)."""
    b = m["body"]
    if "text" in b:
        return b["text"].encode("utf-8")
    if "base64" in b:
        return base64.b64decode(b["base64"])
    if "repeat" in b:
        return (b["repeat"] * b["count"]).encode("utf-8")
    raise ValueError(f"unknown body form {sorted(b)}")


def message_from_input(m: dict, wrote: list[int]) -> Message:
    """An input.json message as a :class:`Message` with every stored field given (replay).

    ``wrote`` holds the phy offsets of the messages replayed so far, for
    ``preparedTransactionOffsetFromIndex``."""
    pto = m.get("preparedTransactionOffset", 0)
    if "preparedTransactionOffsetFromIndex" in m:
        pto = wrote[m["preparedTransactionOffsetFromIndex"]]
    return Message(topic=m["topic"], body=body_of(m), queue_id=m["queueId"], flag=m["flag"],
                   sys_flag=m["sysFlag"], properties=[tuple(p) for p in m["properties"]],
                   born_timestamp=m["bornTimestamp"], born_host=m["bornHost"], store_host=m["storeHost"],
                   store_timestamp=m["storeTimestamp"], reconsume_times=m["reconsumeTimes"],
                   prepared_transaction_offset=pto)


def _sized_hashes(root) -> dict[str, tuple[int, str]]:
    """``relative path -> (size, sha256)`` of every file under ``root``."""
    out = {}
    for rel, p in _files(root):
        data = read_bytes(p)
        out[rel] = (len(data), hashlib.sha256(data).hexdigest())
    return out


def vector_changes(vs: VectorSet) -> list[str]:
    """How the files of a vector store differ from what RocketMQ wrote (expected.json ``raw.files``:
    path, size, sha256; index files, named by creation time, compared by content): empty if they do not."""
    want = {f["path"]: (f["size"], f["sha256"]) for f in vs.expected["raw"]["files"]}
    got = _sized_hashes(vs.store)
    out = []
    if sorted(v for k, v in got.items() if k.startswith("index/")) != \
            sorted(v for k, v in want.items() if k.startswith("index/")):
        out.append(f"{vs.name}: index/ differs")
    others_got = {k: v for k, v in got.items() if not k.startswith("index/")}
    others_want = {k: v for k, v in want.items() if not k.startswith("index/")}
    out += [f"{vs.name}: {k} {'added' if k not in others_want else 'missing' if k not in others_got else 'changed'}"
            for k in sorted(set(others_got) | set(others_want)) if others_got.get(k) != others_want.get(k)]
    return out


# ------------------------------------------------------------------------------------------------
# Files and stores
# ------------------------------------------------------------------------------------------------

def _files(root):
    """``(relative path, path)`` of every file under ``root``."""
    root = str(root)
    for dp, _, fs in os.walk(root):
        for f in fs:
            p = os.path.join(dp, f)
            yield os.path.relpath(p, root), p


def read_bytes(path) -> bytes:
    """The bytes of the file ``path``."""
    with open(path, "rb") as fh:
        return fh.read()


def tree_bytes(root) -> dict[str, bytes]:
    """``relative path -> bytes`` of every file under ``root``."""
    return {rel: read_bytes(p) for rel, p in _files(root)}


def tree_hashes(root) -> dict[str, str]:
    """``relative path -> sha256`` of every file under ``root``."""
    return {rel: hashlib.sha256(read_bytes(p)).hexdigest() for rel, p in _files(root)}


def segment_of(store, phy: int, segment_size: int) -> tuple[str, int]:
    """(path of the commitlog segment of ``store`` that holds ``phy``, position of ``phy`` in it)."""
    start = phy - phy % segment_size
    return os.path.join(str(store), "commitlog", f"{start:020d}"), phy - start


def patch_file(path, pos: int, data: bytes) -> None:
    """Overwrite ``data`` at ``pos`` of the file ``path`` in place."""
    with open(path, "r+b") as fh:
        fh.seek(pos)
        fh.write(data)


def open_inferred(path, read_only: bool = True) -> MessageStore:
    """The store at ``path`` opened with the configuration its files imply (as the CLI opens it)."""
    return MessageStore.open(str(path), infer_config(str(path)), read_only=read_only)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout: float = 15.0, what: str | None = None):
    """Poll ``pred()`` until it is truthy (every 20 ms, up to ``timeout`` s) and return its value; at
    the timeout the last value, or with ``what`` an AssertionError naming what was awaited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    v = pred()
    if not v and what is not None:
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")
    return v


def commitlog_bytes(st: MessageStore, start: int, end: int) -> bytes:
    """The commitlog bytes ``[start, end)`` of an open store, across its segments."""
    out, pos = bytearray(), start
    while pos < end:
        mf = st.commit_log.queue.find(pos)
        k = min(end, mf.file_from_offset + mf.file_size) - pos
        out += mf.mm[pos - mf.file_from_offset:pos - mf.file_from_offset + k]
        pos += k
    return bytes(out)


def assert_commitlog_prefix(master: MessageStore, slave: MessageStore) -> None:
    """A replica's commitlog is a byte-identical prefix of its master's (from the replica's first byte)."""
    a, b = slave.commit_log.min_offset, slave.commit_log.confirm_offset
    assert b <= master.commit_log.confirm_offset
    assert commitlog_bytes(slave, a, b) == commitlog_bytes(master, a, b)


def sigterm_and_wait(p) -> str:
    """SIGTERM a server process and return its stderr once it exited 0 (killed if it does not stop
    within 30 s)."""
    try:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    return err


def consumer_heartbeat(client_id: str, group: str, topic: str) -> dict:
    """The HEART_BEAT body of a push consumer in CLUSTERING mode subscribed to ``topic`` (``*``), as
    RocketMQ's clients send it."""
    return {"clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 1,
                                 "classFilterMode": False, "expressionType": "TAG"}]}]}


def fill_queue(st: MessageStore, n: int, topic: str = "T", queue_id: int = 0, tags=None, keys=None, ts=None) -> list:
    """Put ``n`` plain messages into one queue of ``st`` (bodies ``{topic}-{queue_id}-{i}``; TAGS
    cycling through ``tags``, KEYS ``keys(i)``, store time ``ts(i)`` when given), check each is
    PUT_OK, wait until they are dispatched; the put results."""
    from rmqstore import PutMessageStatus

    out = []
    for i in range(n):
        props = []
        if tags:
            props.append(("TAGS", tags[i % len(tags)]))
        if keys:
            props.append(("KEYS", keys(i)))
        r = st.put_message(msg(topic, f"{topic}-{queue_id}-{i}".encode(), props or None, queue_id=queue_id,
                               store_timestamp=None if ts is None else ts(i)))
        assert r.status is PutMessageStatus.PUT_OK
        out.append(r)
    st.wait_dispatched()
    return out


# ------------------------------------------------------------------------------------------------
# MessageStore answers, in the data source's shape (what the Spark tests compare DataFrames with)
# ------------------------------------------------------------------------------------------------

#: split sizes that cut each vector store into a few dozen partitions, several inside a segment
#: (every partition is a Spark task, ~50 ms each; resync at many more split sizes: test_scan.py)
SPLITS = {"basic": 1500, "propcrc": 700, "rollover": 40_000}


def record_offsets(st: MessageStore) -> list[int]:
    """Commitlog offsets of every record the store holds, in order (the store's own iterator)."""
    from rmqstore.engine.dispatch import iter_record_batches

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
