"""`rmqstore reset-offset`: a consumer group's committed offsets moved in a stopped broker's store,
by store time (the broker's resetOffsetByTime answer) or to an offset; the file written as
RocketMQ's broker writes it, the old one kept as .bak; a live store refused with exit 4."""
from __future__ import annotations

import json

import pytest

from rmqstore import MessageStore
from rmqstore.broker.admin_ops import reset_target_offsets
from rmqstore.engine.consumer_offsets import ConsumerOffsetManager, parse_broker_json

T0 = 1_700_000_000_000
#: queue 0 stores at T0, T0+2s, T0+4s, T0+6s; queue 1 at T0+1s, T0+3s, T0+5s
STORE_TIMES = {0: [T0, T0 + 2000, T0 + 4000, T0 + 6000], 1: [T0 + 1000, T0 + 3000, T0 + 5000]}


@pytest.fixture
def store(run, tmp_path):
    rows = sorted((ts, q) for q, times in STORE_TIMES.items() for ts in times)
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text("".join(json.dumps({"topic": "Orders", "body": f"m{i}", "queue_id": q, "store_timestamp": ts})
                             + "\n" for i, (ts, q) in enumerate(rows)))
    path = tmp_path / "store"
    run.ok("load", jsonl, "--store", path, "--create")
    with MessageStore.open(path) as st:
        st.consumer_offsets.commit_offset("billing", "Orders", 0, 4)
        st.consumer_offsets.commit_offset("billing", "Orders", 1, 3)
        st.consumer_offsets.commit_offset("audit", "Other", 0, 0)
    return path


def offsets_file(path):
    return path / "config" / "consumerOffset.json"


def first_at_or_after(times, ts):
    return next((i for i, t in enumerate(times) if t >= ts), len(times))


@pytest.mark.parametrize("ts", [T0 - 1, T0 + 1500, T0 + 3000, T0 + 5500, T0 + 99_000])
def test_by_time_moves_each_queue_to_the_first_message_stored_at_or_after(run, store, ts):
    before = offsets_file(store).read_text()
    got = run.json("reset-offset", "billing", "Orders", "--timestamp", ts, "--store", store)
    want = {q: first_at_or_after(times, ts) for q, times in STORE_TIMES.items()}
    assert {r["queue_id"]: r["new_offset"] for r in got["queues"]} == want
    assert {r["queue_id"]: r["old_offset"] for r in got["queues"]} == {0: 4, 1: 3}
    assert got["written"] is (want != {0: 4, 1: 3})
    with MessageStore.open(store, read_only=True) as st:  # the store's own reader
        assert st.consumer_offsets.query_offsets("billing", "Orders") == want
        assert st.consumer_offsets.query_offsets("audit", "Other") == {0: 0}  # other entries kept
        assert reset_target_offsets(st, "Orders", 2, ts) == want  # what the running broker computes
    if got["written"]:
        assert (store / "config" / "consumerOffset.json.bak").read_text() == before


def test_the_file_is_in_rocketmqs_format(run, store):
    run.ok("reset-offset", "billing", "Orders", "-s", T0 + 1500, "--store", store)
    text = offsets_file(store).read_text()
    assert text.startswith('{\n\t"dataVersion":{\n\t\t"counter":') and text.endswith("\n\t}\n}")
    assert '\n\t\t"Orders@billing":{0:1,1:1\n\t\t}' in text  # fastjson: unquoted queue ids
    assert '\t"groupTopicMap":{\n\t\t"audit":["Other"],\n\t\t"billing":["Orders"]\n\t},' in text
    doc = parse_broker_json(text)
    assert doc["offsetTable"] == {"Orders@billing": {"0": 1, "1": 1}, "Other@audit": {"0": 0}}
    m = ConsumerOffsetManager(str(offsets_file(store)))
    m.load()
    assert m.query_offsets("billing", "Orders") == {0: 1, 1: 1}


def test_now_and_mqadmins_time_form(run, store):
    got = run.json("reset-offset", "billing", "Orders", "-s", "now", "--dry-run", "--store", store)
    assert {r["queue_id"]: r["new_offset"] for r in got["queues"]} == {0: 4, 1: 3}  # the queues' ends
    import datetime as dt
    local = dt.datetime.fromtimestamp((T0 + 2000) / 1000).strftime("%Y-%m-%d#%H:%M:%S:000")
    got = run.json("reset-offset", "billing", "Orders", "-s", local, "--dry-run", "--store", store)
    assert got["timestamp"] == T0 + 2000 and got["queues"][0]["new_offset"] == 1


def test_by_offset_every_queue_or_one(run, store):
    got = run.json("reset-offset", "billing", "Orders", "--offset", 2, "--store", store)
    assert {r["queue_id"]: r["new_offset"] for r in got["queues"]} == {0: 2, 1: 2}
    got = run.json("reset-offset", "billing", "Orders", "--offset", 0, "--queue", 1, "--store", store)
    assert [(r["queue_id"], r["old_offset"], r["new_offset"]) for r in got["queues"]] == [(1, 2, 0)]
    with MessageStore.open(store, read_only=True) as st:
        assert st.consumer_offsets.query_offsets("billing", "Orders") == {0: 2, 1: 0}
    before = offsets_file(store).read_bytes()
    r = run.fails(2, "reset-offset", "billing", "Orders", "--offset", 9, "--queue", 1, "--store", store)
    assert "Target offset 9 not in consume queue range [0-3]" in r.stderr
    r = run.fails(2, "reset-offset", "billing", "Orders", "--offset", 1, "--queue", 5, "--store", store)
    assert "no queue 5" in r.stderr
    assert offsets_file(store).read_bytes() == before


def test_dry_run_writes_nothing_and_usage_errors_name_what_exists(run, store, docref):
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    got = run.json("reset-offset", "billing", "Orders", "-s", T0, "--dry-run", "--store", store)
    docref.same_shape(docref.doc_json("reset-offset"), got, "reset-offset")
    assert got["dry_run"] and not got["written"] and [r["new_offset"] for r in got["queues"]] == [0, 0]
    assert "would move" in run.ok("reset-offset", "billing", "Orders", "-s", T0, "--dry-run", "--store", store).stdout
    r = run.fails(2, "reset-offset", "nobody", "Orders", "-s", T0, "--store", store)
    assert "topic@group entries: Orders@billing, Other@audit" in r.stderr
    run.fails(2, "reset-offset", "billing", "Orders", "--store", store)  # neither --timestamp nor --offset
    run.fails(2, "reset-offset", "billing", "Orders", "-s", T0, "--offset", 1, "--store", store)
    run.fails(2, "reset-offset", "billing", "Orders", "-s", "yesterday-ish", "--store", store)
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == before


def test_a_live_store_is_refused(run, store):
    before = offsets_file(store).read_bytes()
    with MessageStore.open(store):  # holds the writer lock, as a running broker does
        r = run.fails(4, "reset-offset", "billing", "Orders", "-s", T0, "--store", store)
        assert "holds the store lock" in r.stderr
    assert offsets_file(store).read_bytes() == before
    run.ok("reset-offset", "billing", "Orders", "-s", T0, "--store", store)  # stopped: it works
