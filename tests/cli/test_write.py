"""Writing commands: send and load (load is checked byte for byte against RocketMQ-written files)."""
from __future__ import annotations

import json
import os

import pytest

from tests.kit import open_inferred


def _conf(tmp_path, props: dict, name="broker.conf"):
    p = tmp_path / name
    p.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return p


def _jsonl(tmp_path, objs, name="in.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objs), encoding="utf-8")
    return p


def test_send_writes_what_the_api_reads(run, tmp_path):
    store = tmp_path / "s"
    got = run.json("send", "Orders", "hello world", "--tags", "TagA", "--keys", "order-1 cust-9", "--keys", "k3",
                   "--property", "source=cli", "--property", "n=1", "--queue", 2, "--create", "--store", store)
    assert got["status"] == "PUT_OK" and got["queue_id"] == 2 and got["queue_offset"] == 0
    with open_inferred(store) as st:
        rec = st.look_message_by_offset(got["phy_offset"])
        assert rec.msg_id == got["msg_id"] and rec.uniq_key == got["uniq_key"]
        assert rec.store_timestamp == got["store_timestamp"] and rec.store_size == got["wrote_bytes"]
        assert rec.body == b"hello world" and rec.tags == "TagA" and rec.keys == ["order-1", "cust-9", "k3"]
        assert rec.properties["source"] == "cli" and rec.properties["n"] == "1"
        assert st.get_max_offset_in_queue("Orders", 2) == 1  # dispatched before send returned
    second = run.json("send", "Orders", "--body-file", "-", "--queue", 2, "--store", store, input=b"\x00\x01")
    assert second["queue_offset"] == 1 and second["phy_offset"] == got["phy_offset"] + got["wrote_bytes"]
    assert run.json("query-key", "Orders", "cust-9", "--store", store)["messages"][0]["msg_id"] == got["msg_id"]
    table = run.ok("send", "Orders", "again", "--store", store).stdout
    assert "PUT_OK" in table


def test_send_needs_create_and_refuses_foreign_directories(run, tmp_path):
    missing = tmp_path / "nothing-here"
    r = run.fails(3, "send", "T", "x", "--store", missing)
    assert "--create" in r.stderr and not missing.exists()
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    run.fails(3, "send", "T", "x", "--store", foreign)
    run.fails(3, "send", "T", "x", "--store", foreign, "--create")
    assert sorted(os.listdir(foreign)) == ["notes.txt"]
    run.fails(2, "send", "T", "--store", missing, "--create")  # no body
    run.fails(2, "send", "T", "x", "--body-file", "-", "--store", missing, "--create", input=b"y")  # two bodies


def test_send_refused_by_the_store_exits_13(run, tmp_path):
    store = tmp_path / "s"
    conf = _conf(tmp_path, {"maxMessageSize": 512})
    run.ok("send", "T", "small", "--create", "--store", store, "--config", conf)
    r = run.fails(13, "send", "T", "x" * 2000, "--store", store, "--config", conf, "--json")
    assert json.loads(r.stdout)["status"] == "MESSAGE_ILLEGAL"
    assert "MESSAGE_ILLEGAL" in r.stderr


@pytest.mark.parametrize("name", ["basic", "propcrc", "rollover"])
def test_load_of_rocketmq_input_is_byte_identical(run, vectors, tmp_path, name):
    vs = vectors.load(name)
    src = _jsonl(tmp_path, vs.input["messages"])
    conf = _conf(tmp_path, vs.input["config"])
    out = tmp_path / "loaded"
    got = run.json("load", src, "--create", "--store", out, "--config", conf)
    assert got["messages"] == len(vs.input["messages"])
    assert got["end_phy_offset"] == vs.expected["api"]["maxPhyOffset"]
    assert got["bytes"] == sum(p["wroteBytes"] for p in vs.expected["putResults"])
    for sub in ("commitlog", "consumequeue"):
        want = vectors.tree_hashes(vs.store / sub)
        assert vectors.tree_hashes(out / sub) == want, sub


def test_load_checks_the_whole_file_first(run, tmp_path):
    good = {"topic": "T", "body": "a", "store_timestamp": 1700000000000}
    src = _jsonl(tmp_path, [good, good, {"topic": "T", "body": "b", "queueId": "one"}])
    store = tmp_path / "s"
    r = run.fails(2, "load", src, "--create", "--store", store)
    assert f"{src}:3" in r.stderr and "queue_id" in r.stderr
    assert not store.exists()
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"topic": "T"}\n{"topic": \n')
    assert f"{bad_json}:2" in run.fails(2, "load", bad_json, "--create", "--store", store).stderr
    for obj, word in (({"body": "x"}, "topic"), ({"topic": "T", "colour": 1}, "colour"),
                      ({"topic": "T", "properties": {"TAGS": "a"}, "tags": "b"}, "TAGS"),
                      ({"topic": "T", "body": "x", "body_hex": "00"}, "body_hex")):
        p = _jsonl(tmp_path, [obj], "one.jsonl")
        assert word in run.fails(2, "load", p, "--create", "--store", store).stderr
    run.fails(2, "load", tmp_path / "missing.jsonl", "--create", "--store", store)
    assert not store.exists()


def test_load_forms_stdin_and_refusal(run, tmp_path):
    store = tmp_path / "s"
    lines = [
        {"topic": "T", "body": "plain", "tags": "A", "keys": ["k1", "k2"], "uniq_key": "U1",
         "properties": [["z", "1"], ["a", "2"]], "store_timestamp": 1700000000123, "born_timestamp": 1700000000100,
         "born_host": "10.1.2.3:5555", "store_host": "10.0.0.9:10911", "queue_id": 1, "flag": 3},
        {"topic": "T", "body_base64": "AAEC"},
        {"topic": "T", "body_hex": "ff00"},
        {"topic": "T", "body": {"repeat": "ab", "count": 3}},
        {"topic": "T", "body": {"text": "t"}, "queueId": 1, "storeTimestamp": 1700000000999},
    ]
    text = "# a comment\n\n" + "".join(json.dumps(o) + "\n" for o in lines)
    got = run.json("load", "-", "--create", "--store", store, input=text)
    assert got["messages"] == 5 and got["file"] == "<stdin>"
    with open_inferred(store) as st:
        msgs = st.get_message("g", "T", 1, 0, 10).messages + st.get_message("g", "T", 0, 0, 10).messages
    first = msgs[0]
    assert first.body == b"plain" and first.store_timestamp == 1700000000123 and first.born_host == "10.1.2.3:5555"
    assert first.store_host == "10.0.0.9:10911" and first.flag == 3 and first.born_timestamp == 1700000000100
    assert list(first.properties.items()) == [("TAGS", "A"), ("KEYS", "k1 k2"), ("UNIQ_KEY", "U1"), ("z", "1"), ("a", "2")]
    assert msgs[1].store_timestamp == 1700000000999 and msgs[1].body == b"t"
    assert [m.body for m in msgs[2:]] == [b"\x00\x01\x02", b"\xff\x00", b"ababab"]
    assert all(m.uniq_key is None for m in msgs[1:])  # nothing added unless asked
    run.json("load", "-", "--uniq-keys", "--store", store, input=json.dumps({"topic": "U", "body": "x"}))
    with open_inferred(store) as st:
        rec = st.get_message("g", "U", 0, 0, 1).messages[0]
    assert rec.uniq_key and run.json("query-unique-key", "U", rec.uniq_key, "--store", store)["messages"]
    # the store refuses line 2: line 1 stays, the error names the line
    conf = _conf(tmp_path, {"maxMessageSize": 256})
    src = _jsonl(tmp_path, [{"topic": "R", "body": "ok"}, {"topic": "R", "body": "x" * 1000}, {"topic": "R"}])
    r = run.fails(13, "load", src, "--store", store, "--config", conf)
    assert f"{src}:2" in r.stderr and "MESSAGE_ILLEGAL" in r.stderr
    with open_inferred(store) as st:
        assert st.get_max_offset_in_queue("R", 0) == 1


def test_load_is_reproducible(run, vectors, tmp_path):
    objs = [{"topic": f"T{i % 3}", "body": f"m{i}", "queue_id": i % 2, "keys": [f"k{i}"],
             "store_timestamp": 1700000000000 + i * 10, "born_timestamp": 1700000000000 + i * 10 - 3,
             "born_host": "1.2.3.4:1", "store_host": "5.6.7.8:10911"} for i in range(50)]
    src = _jsonl(tmp_path, objs)
    conf = _conf(tmp_path, {"mappedFileSizeCommitLog": 2048, "mappedFileSizeConsumeQueue": 200})
    for d in ("a", "b"):
        run.json("load", src, "--create", "--store", tmp_path / d, "--config", conf)
    assert len(os.listdir(tmp_path / "a" / "commitlog")) > 1  # rolled over segments
    for sub in ("commitlog", "consumequeue"):
        assert vectors.tree_hashes(tmp_path / "a" / sub) == vectors.tree_hashes(tmp_path / "b" / sub)
