"""Reading commands on RocketMQ-written stores, checked against RocketMQ's own answers
(vectors/*/expected.json) or, where the CLI adds behaviour, against the Python API."""
from __future__ import annotations

import datetime as dt
import time

import pytest

from tests.kit import open_inferred


# ------------------------------------------------------------------------------------------------
# topic-status / stats
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["basic", "rollover"])
def test_topic_status_matches_rocketmq(run, vectors, truth, name):
    vs = vectors.load(name)
    by_phy = vs.messages_by_phy
    got = run.json("topic-status", "--store", vs.store)["queues"]
    expected = []
    for topic, queues in sorted(vs.expected["api"]["consumeQueues"].items()):
        for q, cq in sorted(queues.items(), key=lambda kv: int(kv[0])):
            last = by_phy[cq["units"][-1][1]]["storeTimestamp"] if cq["units"] else -1
            expected.append({"topic": topic, "queue_id": int(q), "min_offset": cq["minOffset"],
                             "max_offset": cq["maxOffset"], "messages": cq["messageTotalInQueue"],
                             "last_store_timestamp": last})
    assert got == expected
    one = run.json("topic-status", expected[0]["topic"], "--store", vs.store)["queues"]
    assert one == [e for e in expected if e["topic"] == expected[0]["topic"]]


def test_stats_matches_consume_queues(run, vectors):
    vs = vectors.load("rollover")
    by_phy = vs.messages_by_phy
    got = run.json("stats", "--store", vs.store)
    rows = {(r["topic"], r["queue_id"]): r for r in got["queues"]}
    total_msgs = total_bytes = 0
    for topic, queues in vs.expected["api"]["consumeQueues"].items():
        for q, cq in queues.items():
            r = rows.pop((topic, int(q)))
            units = cq["units"]
            assert r["messages"] == len(units) == cq["messageTotalInQueue"]
            assert r["bytes"] == sum(u[2] for u in units)
            assert r["first_store_timestamp"] == by_phy[units[0][1]]["storeTimestamp"]
            assert r["last_store_timestamp"] == by_phy[units[-1][1]]["storeTimestamp"]
            total_msgs += len(units)
            total_bytes += sum(u[2] for u in units)
    assert rows == {}
    assert got["totals"]["messages"] == total_msgs == len(vs.expected["putResults"])
    assert got["totals"]["bytes"] == total_bytes
    assert got["commitlog"]["max_offset"] == vs.expected["api"]["maxPhyOffset"]
    for t in got["topics"]:
        assert t["messages"] == sum(r["messages"] for r in got["queues"] if r["topic"] == t["topic"])
    only = run.json("stats", "--topic", "RollB", "--store", vs.store)
    assert {r["topic"] for r in only["queues"]} == {"RollB"}
    table = run.ok("stats", "--store", vs.store).stdout
    assert f"{total_msgs:,}" in table and "RollA" in table


# ------------------------------------------------------------------------------------------------
# pull
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["basic", "rollover"])
def test_pull_single_matches_rocketmq_get_message(run, vectors, name):
    vs = vectors.load(name)
    for g in vs.expected["api"]["getMessage"]:
        args = ["pull", g["topic"], "--queue", g["queueId"], "--offset", g["offset"], "--count", g["maxMsgNums"],
                "--single", "--store", vs.store]
        if g.get("note") in ("queue never written", "topic never written"):
            run.fails(10, *args)  # the CLI names an unknown topic/queue instead of NO_MESSAGE_IN_QUEUE
            continue
        got = run.json(*args, "--no-body")
        assert got["status"] == g["status"], g
        assert got["next_begin_offset"] == g["nextBeginOffset"], g
        assert (got["min_offset"], got["max_offset"]) == (g["minOffset"], g["maxOffset"])
        assert [m["phy_offset"] for m in got["messages"]] == [m["phyOffset"] for m in g["messages"]]
        assert [m["msg_id"] for m in got["messages"]] == [m["offsetMsgId"] for m in g["messages"]]


def test_pull_repeats_across_consume_queue_files_and_filters_tags(run, vectors, truth):
    t = truth("rollover")
    vs = t.vs
    units = vs.expected["api"]["consumeQueues"]["RollA"]["0"]["units"]
    got = run.json("pull", "RollA", "-q", 0, "-o", 10, "-n", 100, "--store", vs.store)
    assert [m["phy_offset"] for m in got["messages"]] == [u[1] for u in units[10:110]]
    assert got["next_begin_offset"] == 110 and got["calls"] > 1
    # a tag expression keeps exactly the messages with those tags (checked on the vector input)
    rows = [r for r in t.rows if r["topic"] == "RollA" and r["queue_id"] == 0]
    tags = sorted({r["props"].get("TAGS") for r in rows if r["props"].get("TAGS")})
    want = tags[0]
    got = run.json("pull", "RollA", "-q", 0, "-n", 1000, "--tags", want, "--store", vs.store, "--no-body")
    assert [m["phy_offset"] for m in got["messages"]] == [r["phy"] for r in rows if r["props"].get("TAGS") == want]
    assert all(m["tags"] == want for m in got["messages"])
    # below the min offset: the broker's status, nothing invented
    low = run.json("pull", "RollA", "-q", 0, "-o", -1, "--store", vs.store)
    assert low["status"] == "OFFSET_TOO_SMALL" and low["messages"] == []
    table = run.ok("pull", "RollA", "-q", 0, "-n", 3, "--store", vs.store).stdout
    for u in units[:3]:
        assert str(u[1]) in table


# ------------------------------------------------------------------------------------------------
# query-key / query-unique-key / query-id / query-offset / print
# ------------------------------------------------------------------------------------------------
def test_query_key_upstream_matches_rocketmq(run, vectors):
    vs = vectors.load("basic")
    for q in vs.expected["api"]["keyQueries"]:
        args = ["query-key", q["topic"], q["key"], "--max", q["maxNum"], "--begin", q["begin"], "--end", q["end"],
                "--upstream", "--store", vs.store, "--no-body"]
        want = [m["phyOffset"] for m in q["queryMessage"]]
        if not want and q["topic"] not in ("TopicTest", "OrderTopic"):
            run.fails(10, *args)
            continue
        got = run.json(*args)
        assert [m["phy_offset"] for m in got["messages"]] == want, q


def test_query_key_exact_agrees_with_api(run, vectors, truth):
    t = truth("rollover")
    keys = {}
    for r in t.rows:
        for k in r["props"].get("KEYS", "").split(" "):
            if k:
                keys.setdefault((r["topic"], k), []).append(r["phy"])
    common = sorted(keys.items(), key=lambda kv: -len(kv[1]))[:3]
    with open_inferred(t.store) as st:
        for (topic, key), phys in common:
            got = run.json("query-key", topic, key, "--max", 1000, "--store", t.store)
            assert [m["phy_offset"] for m in got["messages"]] == sorted(phys)
            assert all(key in m["keys"] for m in got["messages"])
            assert got["truncated"] is False
            capped = run.json("query-key", topic, key, "--max", 5, "--store", t.store, "--no-body")
            api = st.query_message(topic, key, max_num=5)
            assert [m["phy_offset"] for m in capped["messages"]] == [m.phy_offset for m in api.messages]
            assert capped["truncated"] is api.truncated is True
            mid = sorted(phys)[len(phys) // 2]
            ts = next(r["store_ts"] for r in t.rows if r["phy"] == mid)
            # the index keeps store times in whole seconds: a window a second wide of the mark holds it
            win = run.json("query-key", topic, key, "--begin", ts - 1000, "--max", 1000, "--store", t.store,
                           "--no-body")
            api = st.query_message(topic, key, max_num=1000, begin_ms=ts - 1000)
            assert [m["phy_offset"] for m in win["messages"]] == [m.phy_offset for m in api.messages]
            assert mid in [m["phy_offset"] for m in win["messages"]]
    run.ok("query-key", "RollA", "no-such-key", "--store", t.store)  # known topic, no match: exit 0


def test_query_unique_key_and_id_and_offset(run, truth):
    t = truth("basic")
    for r in t.rows[::4]:
        if r["uniq_key"]:
            got = run.json("query-unique-key", r["topic"], r["uniq_key"], "--store", t.store)
            want = [x["phy"] for x in t.rows if x["uniq_key"] == r["uniq_key"] and x["topic"] == r["topic"]]
            assert [m["phy_offset"] for m in got["messages"]] == want
        by_id = run.json("query-id", r["msg_id"], "--store", t.store)
        by_off = run.json("query-offset", r["phy"], "--store", t.store)
        assert by_id == by_off
        rec = r["record"]
        assert by_id["phy_offset"] == r["phy"] and by_id["msg_id"] == r["msg_id"]
        assert (by_id["topic"], by_id["queue_id"], by_id["queue_offset"]) == (r["topic"], r["queue_id"], r["queue_offset"])
        assert by_id["store_timestamp"] == rec["storeTimestamp"] and by_id["born_timestamp"] == rec["bornTimestamp"]
        assert by_id["born_host"] == rec["bornHost"] and by_id["store_host"] == rec["storeHost"]
        assert by_id["body_crc"] == rec["bodyCRC"] and by_id["sys_flag"] == rec["sysFlag"]
        assert by_id["properties"] == r["props"]
        assert by_id["tags_code"] == rec["dispatchTagsCode"]
        assert by_id["body_size"] == len(r["body"])
        assert by_id["body_encoding"] == "utf-8" and by_id["body"].encode() == r["body"]
    # lower-case ids are accepted
    r = t.rows[3]
    assert run.json("query-id", r["msg_id"].lower(), "--store", t.store)["phy_offset"] == r["phy"]


def test_print_locators_and_body_forms(run, truth):
    t = truth("basic")
    r = next(x for x in t.rows if x["body"])
    loc_q = f"{r['topic']}:{r['queue_id']}:{r['queue_offset']}"
    docs = [run.json("print", loc, "--store", t.store) for loc in (str(r["phy"]), r["msg_id"], loc_q)]
    assert docs[0] == docs[1] == docs[2]
    assert docs[0]["phy_offset"] == r["phy"]
    hexed = run.json("print", r["msg_id"], "--body-as", "hex", "--store", t.store)
    assert hexed["body_encoding"] == "hex" and bytes.fromhex(hexed["body"]) == r["body"]
    table = run.ok("print", loc_q, "--store", t.store).stdout
    for value in (r["msg_id"], r["topic"], str(r["store_ts"]), r["body"].decode(), *r["props"].values()):
        assert value in table
    dump = run.ok("print", str(r["phy"]), "--body-as", "hex", "--store", t.store).stdout
    assert " ".join(f"{b:02x}" for b in r["body"][:8]) in dump
    empty = next((x for x in t.rows if not x["body"]), None)
    if empty is not None:
        assert run.json("print", str(empty["phy"]), "--store", t.store)["body"] == ""


# ------------------------------------------------------------------------------------------------
# browse
# ------------------------------------------------------------------------------------------------
def test_browse_streams_everything_in_commitlog_order(run, truth):
    t = truth("rollover")
    got = run.json_lines("browse", "--store", t.store, "--no-body")
    assert [m["phy_offset"] for m in got] == [r["phy"] for r in t.rows]
    assert "body" not in got[0]
    lines = run.ok("browse", "--store", t.store).stdout.splitlines()
    assert len(lines) == len(t.rows) + 1 and f"{len(t.rows)} messages matched" in lines[-1]
    first = run.json_lines("browse", "--limit", 7, "--store", t.store)
    assert [m["phy_offset"] for m in first] == [r["phy"] for r in t.rows[:7]]


def test_browse_filters_agree_with_the_input(run, truth):
    t = truth("rollover")
    rows = [r for r in t.rows if r["topic"] == "RollB"]
    b, e = rows[len(rows) // 4]["store_ts"], rows[3 * len(rows) // 4]["store_ts"]
    got = run.json_lines("browse", "RollB", "--begin", b, "--end", e, "--store", t.store, "--no-body")
    assert [m["phy_offset"] for m in got] == [r["phy"] for r in rows if b <= r["store_ts"] <= e]
    # ISO times mean the same instants
    iso_b = dt.datetime.fromtimestamp(b / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")
    got_iso = run.json_lines("browse", "RollB", "--begin", iso_b, "--end", e, "--store", t.store, "--no-body")
    assert got_iso == got
    # tags, key, property and body filters
    tag = next(r["props"]["TAGS"] for r in rows if r["props"].get("TAGS"))
    got = run.json_lines("browse", "RollB", "--tags", tag, "--store", t.store, "--no-body")
    assert [m["phy_offset"] for m in got] == [r["phy"] for r in rows if r["props"].get("TAGS") == tag]
    key = next(k for r in rows for k in r["props"].get("KEYS", "").split(" ") if k)
    got = run.json_lines("browse", "--key", key, "--store", t.store, "--no-body")
    assert [m["phy_offset"] for m in got] == [r["phy"] for r in t.rows if key in r["props"].get("KEYS", "").split(" ")]
    name, value = next((k, v) for r in rows for k, v in r["props"].items() if k not in ("UNIQ_KEY", "KEYS", "TAGS"))
    got = run.json_lines("browse", "RollB", "--property", f"{name}={value}", "--queue", 1, "--store", t.store)
    assert [m["phy_offset"] for m in got] == [r["phy"] for r in rows if r["props"].get(name) == value
                                               and r["queue_id"] == 1]
    needle = max(rows, key=lambda r: len(r["body"]))["body"][:5]
    got = run.json_lines("browse", "RollB", "--grep", needle.decode(), "--store", t.store, "--no-body")
    assert [m["phy_offset"] for m in got] == [r["phy"] for r in rows if needle in r["body"]]


# ------------------------------------------------------------------------------------------------
# offset-by-time
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["basic", "rollover"])
def test_offset_by_time_matches_rocketmq(run, vectors, name):
    vs = vectors.load(name)
    for o in vs.expected["api"]["offsetByTime"]:
        for boundary in ("lower", "upper"):
            got = run.json("offset-by-time", o["topic"], o["timestamp"], "--queue", o["queueId"],
                           "--boundary", boundary, "--store", vs.store)
            assert [q["offset"] for q in got["queues"]] == [o[boundary]], (o, boundary)
    o = vs.expected["api"]["offsetByTime"][-1]
    every = run.json("offset-by-time", o["topic"], o["timestamp"], "--store", vs.store)
    assert [q["queue_id"] for q in every["queues"]] == sorted(int(q) for q in vs.expected["api"]["consumeQueues"][o["topic"]])


# ------------------------------------------------------------------------------------------------
# presentation: local times with epoch ms, text or hex bodies
# ------------------------------------------------------------------------------------------------
def test_times_are_local_with_epoch_ms(run, truth, monkeypatch):
    t = truth("basic")
    r = t.rows[4]
    for tz in ("UTC", "Asia/Tokyo", "America/New_York"):
        monkeypatch.setenv("TZ", tz)
        time.tzset()
        try:
            from zoneinfo import ZoneInfo

            local = dt.datetime.fromtimestamp(r["store_ts"] / 1000, ZoneInfo(tz))
            shown = local.strftime("%Y-%m-%d %H:%M:%S") + f".{r['store_ts'] % 1000:03d} ({r['store_ts']})"
            assert shown in run.ok("print", str(r["phy"]), "--store", t.store).stdout
            naive_local = local.replace(tzinfo=None).isoformat(timespec="milliseconds")
            got = run.json_lines("browse", r["topic"], "--begin", naive_local, "--end", r["store_ts"],
                                 "--store", t.store, "--no-body")
            assert [m["phy_offset"] for m in got] == [x["phy"] for x in t.rows
                                                      if x["topic"] == r["topic"] and x["store_ts"] == r["store_ts"]]
        finally:
            monkeypatch.delenv("TZ")
            time.tzset()


def test_binary_bodies_show_as_hex(run, tmp_path):
    store = tmp_path / "s"
    (tmp_path / "b.bin").write_bytes(b"\xff\xfe\x00bin")
    sent = run.json("send", "Bin", "--body-file", tmp_path / "b.bin", "--create", "--store", store)
    run.json("send", "Bin", "caf\u00e9 \u2615", "--store", store)
    got = run.json("pull", "Bin", "--store", store)["messages"]
    assert (got[0]["body_encoding"], got[0]["body"]) == ("hex", "fffe0062696e")
    assert (got[1]["body_encoding"], got[1]["body"]) == ("utf-8", "caf\u00e9 \u2615")
    table = run.ok("pull", "Bin", "--store", store).stdout
    assert "hex:fffe0062696e" in table and "caf\u00e9 \u2615" in table
    assert "|...bin|" in run.ok("print", sent["msg_id"], "--store", store).stdout


def test_consumer_progress(run, tmp_path, docref):
    """Committed offset, max offset and lag per group and queue, from the store's own file or a
    broker's fastjson one; read-only (no byte changes); the documented JSON shape."""
    from rmqstore import Message, MessageStore

    path = tmp_path / "s"
    with MessageStore.open(path) as st:
        for i in range(9):
            st.put_message(Message.create("Orders", b"x", queue_id=i % 3))
        st.wait_dispatched()
        c = st.consumer("billing", "Orders")
        assert len(c.poll(max_messages=4, timeout_s=0)) == 4
        c.commit()
    (path / "config" / "consumerOffset.json").write_text(
        '{"offsetTable":{"Orders@billing":{0:2,1:1,2:1},"Orders@audit":{0:3},"Gone@audit":{0:7}}}')
    before = {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}
    got = run.json("consumer-progress", "--store", path)
    rows = {(r["group"], r["topic"], r["queue_id"]): (r["committed_offset"], r["max_offset"], r["lag"]) for r in got["queues"]}
    assert rows == {("billing", "Orders", 0): (2, 3, 1), ("billing", "Orders", 1): (1, 3, 2),
                    ("billing", "Orders", 2): (1, 3, 2), ("audit", "Orders", 0): (3, 3, 0),
                    ("audit", "Gone", 0): (7, -1, 0)}
    assert got["total_lag"] == 5
    docref.same_shape(docref.doc_json("consumer-progress"), got, "consumer-progress")
    only = run.json("consumer-progress", "billing", "--store", path)
    assert {r["group"] for r in only["queues"]} == {"billing"} and only["total_lag"] == 5
    assert "billing" in run.ok("consumer-progress", "--store", path).stdout
    r = run.fails(10, "consumer-progress", "nobody", "--store", path)
    assert "groups with offsets: audit, billing" in r.stderr
    assert "`rmqstore consumer-progress` without GROUP lists" in r.stderr
    assert run("consumer-progress", "--store", path).exit_code == 0  # the command the hint names lists them
    assert {p: p.read_bytes() for p in path.rglob("*") if p.is_file()} == before


def test_consumer_progress_explains_an_empty_answer_and_marks_system_groups(run, tmp_path):
    from rmqstore import Message, MessageStore

    path = tmp_path / "s"
    with MessageStore.open(path) as st:
        st.put_message(Message.create("Orders", b"x"))
        st.wait_dispatched()
    out = run.ok("consumer-progress", "--store", path).stdout
    assert "no consumer group has committed offsets" in " ".join(out.split()) and "commit()" in out
    assert run.json("consumer-progress", "--store", path) == {"store": str(path), "queues": [], "total_lag": 0}
    (path / "config").mkdir(exist_ok=True)
    (path / "config" / "consumerOffset.json").write_text(
        '{"offsetTable":{"rmq_sys_REVIVE_LOG_x@CID_RMQ_SYS_REVIVE_GROUP":{0:0},"Orders@zeta":{0:1},'
        '"Orders@alpha":{0:0}}}')
    got = run.json("consumer-progress", "--store", path)
    assert [r["group"] for r in got["queues"]] == ["alpha", "zeta", "CID_RMQ_SYS_REVIVE_GROUP"]  # users first
    assert [r["system"] for r in got["queues"]] == [False, False, True]
    lines = run.ok("consumer-progress", "--store", path, env={"COLUMNS": "200"}).stdout.splitlines()
    sys_line = next(line for line in lines if "CID_RMQ_SYS_REVIVE_GROUP" in line)
    assert "(system)" in sys_line and not any("(system)" in line for line in lines if "alpha" in line)


@pytest.mark.parametrize("kind", ["zlib", "lz4", "zstd"])
def test_compressed_bodies_are_shown_decoded(run, tmp_path, kind):
    from rmqstore import Message, MessageStore
    from rmqstore.format.compression import compress

    text = "compressed " * 600
    data, flag = compress(text.encode(), kind)
    path = tmp_path / "s"
    with MessageStore.open(path) as st:
        r = st.put_message(Message(topic="Z", body=data, sys_flag=flag, properties={"TAGS": "t"}))
        bad = st.put_message(Message(topic="Z", body=b"not " + kind.encode(), sys_flag=flag))
        st.wait_dispatched()
    got = run.json("print", r.phy_offset, "--store", path)
    assert got["body"] == text and got["compression"] == kind and got["body_size"] == len(data)
    assert got["sys_flag_bits"]["compression"] == kind
    stored = run.json("print", r.phy_offset, "--body-as", "stored", "--store", path)
    assert stored["body_encoding"] == "hex" and bytes.fromhex(stored["body"]) == data
    assert [m["body"] for m in run.json_lines("browse", "Z", "--limit", 1, "--store", path)] == [text]
    assert run.json("pull", "Z", "-q", 0, "--store", path)["messages"][0]["body"] == text
    damaged = run.json("print", bad.phy_offset, "--store", path)  # marked compressed, is not
    assert damaged["body"] == "not " + kind and "does not decompress" in damaged["body_note"]
    table = run.ok("print", r.phy_offset, "--store", path).stdout
    assert f"compression {kind}" in table and "compressed compressed" in table
