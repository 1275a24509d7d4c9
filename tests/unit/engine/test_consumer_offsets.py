"""ConsumerOffsetManager: RocketMQ's consumerOffset.json, read in both key forms, written
atomically with a .bak, thread-safe."""
from __future__ import annotations

import os
import threading

import pytest

from rmqstore import CorruptRecordError, ReadOnlyStoreError
from rmqstore.engine.consumer_offsets import ConsumerOffsetManager, parse_broker_json


def broker_file(counter: int, timestamp: int, members: str) -> str:
    """A consumerOffset.json as RocketMQ's broker writes it: the ``dataVersion`` object, then
    ``members`` (the rest of the bean's properties, as written)."""
    return ("{\n\t\"dataVersion\":{\n"
            f"\t\t\"counter\":{counter},\n\t\t\"stateVersion\":0,\n\t\t\"timestamp\":{timestamp}\n\t}},\n"
            + members)


#: what RocketMQ's broker writes (fastjson, pretty): unquoted integer keys, tabs
FASTJSON = broker_file(7, 1700000000000, """\t"offsetTable":{
\t\t"Orders@billing":{0:42,1:17,2:0
\t\t},
\t\t"%RETRY%billing@billing":{0:3
\t\t},
\t\t"Orders@audit":{0:40}
\t}
}""")


def test_reads_the_brokers_fastjson_file(tmp_path):
    p = tmp_path / "consumerOffset.json"
    p.write_text(FASTJSON)
    m = ConsumerOffsetManager(str(p))
    m.load()
    assert m.query_offset("billing", "Orders", 0) == 42 and m.query_offset("billing", "Orders", 1) == 17
    assert m.query_offset("billing", "Orders", 3) is None and m.query_offset("nobody", "Orders", 0) is None
    assert m.query_offsets("billing", "%RETRY%billing") == {0: 3}
    assert m.groups_of_topic("Orders") == {"billing", "audit"}
    assert m.topics_of_group("billing") == {"Orders", "%RETRY%billing"}
    assert m.table()[("Orders", "audit")] == {0: 40}


#: ConsumerOffsetManager.encode(true) of RocketMQ 5.3 as fastjson 1.2.83 writes it (JavaBeanSerializer:
#: getters by name, a newline and indent before each property; MapSerializer: a newline before each
#: String-keyed entry, none before an Integer-keyed one, a newline before the closing brace of a
#: non-empty map; CollectionCodec: one line), member order sorted
ROCKETMQ_5 = broker_file(8, 1700000000123, """\t"groupTopicMap":{
\t\t"audit":["Orders"],
\t\t"billing":["%RETRY%billing","Orders"]
\t},
\t"offsetTable":{
\t\t"%RETRY%billing@billing":{0:3
\t\t},
\t\t"Orders@audit":{0:40
\t\t},
\t\t"Orders@billing":{0:42,1:17,2:0
\t\t}
\t}
}""")


def test_written_file_is_what_rocketmqs_broker_writes(tmp_path, monkeypatch):
    p = tmp_path / "config" / "consumerOffset.json"
    p.parent.mkdir()
    p.write_text(FASTJSON)  # dataVersion counter 7
    m = ConsumerOffsetManager(str(p))
    m.load()
    assert m.data_version == {"counter": 7, "stateVersion": 0, "timestamp": 1700000000000}
    m.commit_offset("billing", "Orders", 1, 17)  # unchanged: nothing to write
    assert not m.persist()
    m.commit_offset("billing", "Orders", 2, 1)
    m.commit_offset("billing", "Orders", 2, 0)
    monkeypatch.setattr("time.time", lambda: 1700000000.123)
    assert m.persist() and not m.persist()  # written once, nothing changed since
    assert p.read_text() == ROCKETMQ_5
    assert (tmp_path / "config" / "consumerOffset.json.bak").read_text() == FASTJSON
    m2 = ConsumerOffsetManager(str(p))
    m2.load()
    assert m2.table() == m.table() and m2.data_version["counter"] == 8


def test_an_empty_table_is_written_as_fastjson_writes_empty_maps(tmp_path):
    p = tmp_path / "consumerOffset.json"
    m = ConsumerOffsetManager(str(p))
    m.load()  # missing: empty
    assert m.table() == {} and m.data_version["counter"] == 0
    m.commit_offset("g", "T", 0, 1)
    m.remove_group("g")
    assert m.persist()
    text = p.read_text()
    assert '\t"groupTopicMap":{},\n\t"offsetTable":{}\n}' in text and not text.endswith("\n")
    assert parse_broker_json(text)["dataVersion"]["counter"] == 1


def test_persist_keeps_the_previous_file_as_bak_and_load_falls_back(tmp_path):
    p = tmp_path / "consumerOffset.json"
    m = ConsumerOffsetManager(str(p))
    m.commit_offset("g", "T", 0, 1)
    m.persist()
    m.commit_offset("g", "T", 0, 2)
    m.persist()
    assert parse_broker_json((tmp_path / "consumerOffset.json.bak").read_text())["offsetTable"] == {"T@g": {"0": 1}}
    assert not [n for n in os.listdir(tmp_path) if ".tmp." in n]
    p.write_text("")  # an empty file (a crash in upstream's in-place rewrite): the .bak is used
    m2 = ConsumerOffsetManager(str(p))
    m2.load()
    assert m2.query_offset("g", "T", 0) == 1
    os.unlink(p)  # a crash between our two renames leaves only the .bak
    m3 = ConsumerOffsetManager(str(p))
    m3.load()
    assert m3.query_offset("g", "T", 0) == 1


def test_garbage_is_a_typed_error_unless_the_bak_is_good(tmp_path):
    p = tmp_path / "consumerOffset.json"
    p.write_text("{not json")
    with pytest.raises(CorruptRecordError) as e:
        ConsumerOffsetManager(str(p)).load()
    assert e.value.path == str(p)
    (tmp_path / "consumerOffset.json.bak").write_text('{"offsetTable":{"T@g":{"0":5}}}')
    m = ConsumerOffsetManager(str(p))
    m.load()
    assert m.query_offset("g", "T", 0) == 5
    p.write_text('{"offsetTable": 5}')
    (tmp_path / "consumerOffset.json.bak").unlink()
    with pytest.raises(CorruptRecordError):
        ConsumerOffsetManager(str(p)).load()


def test_read_only_never_writes(tmp_path):
    p = tmp_path / "consumerOffset.json"
    p.write_text(FASTJSON)
    before = p.read_bytes()
    m = ConsumerOffsetManager(str(p), read_only=True)
    m.load()
    m.commit_offset("billing", "Orders", 0, 99)
    with pytest.raises(ReadOnlyStoreError):
        m.persist()
    assert p.read_bytes() == before


def test_remove_group_and_lower_offsets(tmp_path):
    m = ConsumerOffsetManager(None)  # memory only
    m.commit_offset("a", "T", 0, 10)
    m.commit_offset("a", "T", 0, 4)  # a reset backwards is taken, as upstream
    m.commit_offset("b", "T", 0, 1)
    assert m.query_offset("a", "T", 0) == 4
    m.remove_group("a")
    assert m.groups_of_topic("T") == {"b"} and not m.persist()


def test_commits_from_many_threads(tmp_path):
    m = ConsumerOffsetManager(str(tmp_path / "o.json"))

    def work(q):
        for i in range(500):
            m.commit_offset("g", "T", q, i)
            if i % 100 == 0:
                m.persist()

    ts = [threading.Thread(target=work, args=(q,)) for q in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    m.persist()
    m2 = ConsumerOffsetManager(str(tmp_path / "o.json"))
    m2.load()
    assert m2.query_offsets("g", "T") == {0: 499, 1: 499, 2: 499, 3: 499}


def test_parse_broker_json_leaves_strings_alone():
    doc = parse_broker_json('{"a":{0:"x,1:y",-1:2}, 3 :"{4:5}"}')
    assert doc == {"a": {"0": "x,1:y", "-1": 2}, "3": "{4:5}"}
