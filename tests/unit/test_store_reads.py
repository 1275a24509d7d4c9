"""store_reads.py, the read half of MessageStore: pulls, key queries, lookups by offset and message id
(FORMAT.md §5.7, §11). The queue-offset answers (offsets by time, min/max offsets):
message_store/test_queue_offsets.py."""
from __future__ import annotations

import threading

import pytest

from rmqstore import GetMessageStatus, Message, PutMessageStatus
from tests.kit import fill_queue, msg

S = GetMessageStatus
T0 = 1_700_000_000_000


@pytest.fixture
def big_store(open_store, make_config):
    return open_store(cfg=make_config(mapped_file_size_commit_log=1 << 16))


# ------------------------------------------------------------------------------------------------
# Pulls
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [32, 20, 10])
def test_pull_sizes(big_store, n):
    rs = fill_queue(big_store, 32)
    g = big_store.get_message("g", "T", 0, 0, n)
    assert g.status is S.FOUND
    assert [m.phy_offset for m in g.messages] == [r.phy_offset for r in rs[:n]]
    assert (g.next_begin_offset, g.min_offset, g.max_offset) == (n, 0, 32)


def test_pull_reads_one_cq_file_per_call(big_store):
    rs = fill_queue(big_store, 60)  # 50 units per CQ file
    g = big_store.get_message("g", "T", 0, 48, 32)
    assert [m.queue_offset for m in g.messages] == [48, 49] and g.next_begin_offset == 50
    g = big_store.get_message("g", "T", 0, 50, 32)
    assert [m.phy_offset for m in g.messages] == [r.phy_offset for r in rs[50:]] and g.next_begin_offset == 60


def test_pull_statuses(big_store):
    assert (lambda g: (g.status, g.next_begin_offset, g.min_offset, g.max_offset))(
        big_store.get_message("g", "T", 0, 0)) == (S.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
    rs = fill_queue(big_store, 5)
    g = big_store.get_message("g", "T", 0, 5)
    assert (g.status, g.next_begin_offset, g.messages) == (S.OFFSET_OVERFLOW_ONE, 5, [])
    g = big_store.get_message("g", "T", 0, 10**9)
    assert (g.status, g.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 5)
    g = big_store.get_message("g", "T", 0, -1)
    assert (g.status, g.next_begin_offset) == (S.OFFSET_TOO_SMALL, 0)
    g = big_store.get_message("g", "T", 0, 1, 0)  # the first message always goes
    assert [m.queue_offset for m in g.messages] == [1]
    big_store.find_consume_queue("T", 0).correct_min_offset(rs[2].phy_offset)
    g = big_store.get_message("g", "T", 0, 0)
    assert (g.status, g.next_begin_offset, g.min_offset) == (S.OFFSET_TOO_SMALL, 2, 2)
    g = big_store.get_message("g", "T", 0, 2)
    assert g.status is S.FOUND and [m.queue_offset for m in g.messages] == [2, 3, 4]
    assert big_store.get_message("g", "T", 1, 0).status is S.NO_MESSAGE_IN_QUEUE


def test_pull_with_tag_filter(big_store):
    only_a = fill_queue(big_store, 6, queue_id=1, tags=["TagA"])
    g = big_store.get_message("g", "T", 1, 0, 32, subscription="TagB")
    assert (g.status, g.messages, g.next_begin_offset) == (S.NO_MATCHED_MESSAGE, [], 6)
    assert [m.phy_offset for m in big_store.get_message("g", "T", 1, 0, 32, "TagA").messages] == [
        r.phy_offset for r in only_a]
    mixed = fill_queue(big_store, 9, queue_id=2, tags=["TagA", "TagB", "TagC"])
    g = big_store.get_message("g", "T", 2, 0, 32, subscription="TagB")
    assert g.status is S.FOUND and [m.phy_offset for m in g.messages] == [mixed[i].phy_offset for i in (1, 4, 7)]
    assert {m.tags for m in g.messages} == {"TagB"} and g.next_begin_offset == 9
    g = big_store.get_message("g", "T", 2, 0, 32, subscription=" TagA || TagC ")
    assert [m.tags for m in g.messages] == ["TagA", "TagC"] * 3
    for everything in (None, "*", ""):
        assert len(big_store.get_message("g", "T", 2, 0, 32, everything).messages) == 9
    # as FilterAPI: only "*" itself is everything; in a list "*" is a literal tag, and "||" has no tags
    assert [m.tags for m in big_store.get_message("g", "T", 2, 0, 32, "TagA || *").messages] == ["TagA"] * 3
    assert big_store.get_message("g", "T", 2, 0, 32, "||").messages == []
    assert big_store.get_message("g", "T", 2, 0, 32, "\u3000TagA").messages == []  # Java's trim keeps U+3000
    g = big_store.get_message("g", "T", 2, 0, 2, subscription="TagC")
    assert [m.queue_offset for m in g.messages] == [2, 5] and g.next_begin_offset == 6


def test_tag_hash_collisions_are_dropped_by_the_exact_tag(big_store):
    rs = fill_queue(big_store, 6, queue_id=3, tags=["Aa", "BB"])  # same Java hash
    g = big_store.get_message("g", "T", 3, 0, 32, subscription="Aa")
    assert [m.phy_offset for m in g.messages] == [rs[i].phy_offset for i in (0, 2, 4)]
    assert g.filtered == 3
    only_bb = fill_queue(big_store, 3, queue_id=4, tags=["BB"])
    g = big_store.get_message("g", "T", 4, 0, 32, subscription="Aa")
    assert (g.status, g.messages, g.filtered, g.next_begin_offset) == (S.NO_MATCHED_MESSAGE, [], 3, len(only_bb))


# ------------------------------------------------------------------------------------------------
# Key queries
# ------------------------------------------------------------------------------------------------

def test_exact_key_query_with_a_hash_collision(big_store):
    ra = big_store.put_message(Message.create("Orders", b"aa", keys=["Aa"]))
    rb = big_store.put_message(Message.create("Orders", b"bb", keys=["BB"]))
    big_store.wait_dispatched()
    assert [m.phy_offset for m in big_store.query_message("Orders", "Aa").messages] == [ra.phy_offset]
    assert [m.phy_offset for m in big_store.query_message("Orders", "BB").messages] == [rb.phy_offset]
    loose = big_store.query_message("Orders", "Aa", exact=False)
    assert [m.phy_offset for m in loose.messages] == [ra.phy_offset, rb.phy_offset]


def test_exact_query_checks_topic_and_whole_tokens(big_store):
    r1 = big_store.put_message(msg("A", props=[("KEYS", "k1 k10")]))
    big_store.put_message(msg("B", props=[("KEYS", "k1")]))
    r3 = big_store.put_message(msg("A", props=[("KEYS", "k1 k1"), ("UNIQ_KEY", "k1")]))  # dups: one result
    big_store.wait_dispatched()
    assert [m.phy_offset for m in big_store.query_message("A", "k1").messages] == [r1.phy_offset, r3.phy_offset]
    assert [m.phy_offset for m in big_store.query_message("A", "k10").messages] == [r1.phy_offset]
    assert big_store.query_message("A", "k").messages == []
    assert [m.phy_offset for m in big_store.query_message_by_unique_key("A", "k1").messages] == [r3.phy_offset]


def test_exact_query_truncated_flag_keeps_the_newest(big_store):
    rs = fill_queue(big_store, 5, keys=lambda i: "same")
    phys = [r.phy_offset for r in rs]
    for max_num, want, truncated in [(3, phys[2:], True), (5, phys, False), (10, phys, False),
                                     (1, phys[4:], True), (0, [], True)]:
        res = big_store.query_message("T", "same", max_num=max_num)
        assert ([m.phy_offset for m in res.messages], res.truncated) == (want, truncated), max_num


def test_exact_query_is_not_capped_at_64(big_store):
    rs = fill_queue(big_store, 70, keys=lambda i: f"k{i} all")
    res = big_store.query_message("T", "all", max_num=100)
    assert [m.phy_offset for m in res.messages] == [r.phy_offset for r in rs] and not res.truncated
    loose = big_store.query_message("T", "all", max_num=100, exact=False)
    assert [m.phy_offset for m in loose.messages] == [r.phy_offset for r in rs[6:]]  # newest 64


def test_key_query_time_window(big_store):
    rs = fill_queue(big_store, 6, keys=lambda i: "w", ts=lambda i: T0 + i * 10_000)
    res = big_store.query_message("T", "w", begin_ms=T0 + 15_000, end_ms=T0 + 40_000)
    assert [m.phy_offset for m in res.messages] == [r.phy_offset for r in rs[2:5]]
    assert big_store.query_message("T", "w", begin_ms=T0 + 60_000).messages == []


def test_message_create_and_unique_key(big_store):
    m = Message.create("U", b"payload", tags="TagX", keys=["a", "b"], queue_id=1, properties={"p": "q"})
    assert list(m.properties) == ["TAGS", "KEYS", "UNIQ_KEY", "p"]
    assert m.properties["KEYS"] == "a b" and len(m.properties["UNIQ_KEY"]) == 32
    assert Message.create("U", b"", keys="x").properties["KEYS"] == "x"
    r = big_store.put_message(m)
    big_store.wait_dispatched()
    rec = big_store.look_message_by_offset(r.phy_offset)
    assert (rec.tags, rec.keys, rec.uniq_key, rec.properties["p"], rec.born_host) == (
        "TagX", ["a", "b"], m.properties["UNIQ_KEY"], "q", "127.0.0.1:0")
    assert [x.phy_offset for x in big_store.query_message_by_unique_key("U", rec.uniq_key).messages] == [r.phy_offset]
    assert [x.phy_offset for x in big_store.query_message("U", rec.uniq_key).messages] == [r.phy_offset]
    assert big_store.query_message_by_unique_key("U", "a").messages == []  # a KEYS token is not a UNIQ_KEY


# ------------------------------------------------------------------------------------------------
# Lookups
# ------------------------------------------------------------------------------------------------

def test_look_first_last_and_past_the_end(big_store):
    rs = fill_queue(big_store, 10)
    rs += [big_store.put_message(msg("T", f"T-0-{10 + i}".encode(), born_host="[::1]:1", store_host="[::1]:2"))
           for i in range(10)]
    big_store.wait_dispatched()
    for q in range(20):
        assert big_store.get_message("g", "T", 0, q, 1).messages[0].body == f"T-0-{q}".encode()
    first, last = rs[0], rs[-1]
    assert big_store.look_message_by_offset(first.phy_offset).body == b"T-0-0"
    assert big_store.look_message_by_offset(last.phy_offset).body == b"T-0-19"
    assert big_store.view_message_by_id(last.msg_id).body == b"T-0-19" and len(last.msg_id) == 56
    assert big_store.look_message_by_offset(last.phy_offset + last.wrote_bytes) is None
    assert big_store.max_phy_offset == last.phy_offset + last.wrote_bytes


def test_pull_scan_is_bounded_by_max_filter_message_size(open_store, make_config):
    """A pull scans at most max(16000, maxMsgNums*20) bytes of consume queue (800 units)."""
    st = open_store(cfg=make_config(mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=6000000))
    fill_queue(st, 1000, tags=["TagA"])
    g = st.get_message("g", "T", 0, 0, 32, subscription="TagB")
    assert (g.status, g.next_begin_offset, g.messages) == (S.NO_MATCHED_MESSAGE, 800, [])
    g = st.get_message("g", "T", 0, 800, 32, subscription="TagB")
    assert (g.status, g.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 1000)
    g = st.get_message("g", "T", 0, 0, 1000, subscription="TagB")  # 1000*20 > 16000
    assert (g.status, g.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 1000)


def test_pull_transfer_limits_in_memory(open_store, make_config):
    """Hot data: at most 32 messages and 256 KiB per pull (the first message always goes)."""
    st = open_store(cfg=make_config(mapped_file_size_commit_log=1 << 21, max_message_size=1 << 20))
    rs = [st.put_message(msg("Big", b"x" * 10_000)) for _ in range(40)]
    rs += [st.put_message(msg("Big", b"y" * 300_000))]
    fill_queue(st, 40, topic="Small")
    assert len(st.get_message("g", "Small", 0, 0, 64).messages) == 32
    size = rs[0].wrote_bytes
    assert len(st.get_message("g", "Big", 0, 0, 64).messages) == 262144 // size
    g = st.get_message("g", "Big", 0, 40, 64)  # one message larger than the byte limit
    assert [m.phy_offset for m in g.messages] == [rs[40].phy_offset] and g.next_begin_offset == 41


def test_pull_transfer_limits_on_disk(open_store, monkeypatch):
    """Cold data (further than 40% of RAM behind the end): at most 8 messages / 64 KiB."""
    st = open_store()
    fill_queue(st, 20)
    monkeypatch.setattr(st, "_ram", 0)  # nothing counts as "in memory"
    g = st.get_message("g", "T", 0, 0, 32)
    assert len(g.messages) == 8 and g.next_begin_offset == 8


def test_pulls_and_queries_while_writing(open_store, make_config):
    """A consumer following the queue while four writers append sees every message exactly once,
    in queue order, with the right body; key queries never return a half-built answer."""
    st = open_store(cfg=make_config(mapped_file_size_commit_log=1 << 14, mapped_file_size_consume_queue=400))
    n_per, writers = 150, 4
    errors: list = []

    def write(w):
        try:
            for j in range(n_per):
                r = st.put_message(msg("Live", f"{w}-{j}".encode(), [("KEYS", f"w{w}")]))
                assert r.status is PutMessageStatus.PUT_OK
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    seen: list = []
    offset = 0
    while offset < n_per * writers and not errors:
        g = st.get_message("c", "Live", 0, offset, 16)
        if g.status is S.FOUND:
            assert [m.queue_offset for m in g.messages] == list(range(offset, offset + len(g.messages)))
            seen += g.messages
            offset = g.next_begin_offset
        else:
            assert g.status in (S.NO_MESSAGE_IN_QUEUE, S.OFFSET_OVERFLOW_ONE), g.status
        for m in st.query_message("Live", "w1", max_num=1000).messages:
            assert m.keys == ["w1"] and m.body.startswith(b"1-")
    for t in threads:
        t.join()
    assert not errors
    assert len(seen) == n_per * writers
    by_writer: dict = {}
    for m in seen:
        w, j = m.body.decode().split("-")
        by_writer.setdefault(w, []).append(int(j))
    assert by_writer == {str(w): list(range(n_per)) for w in range(writers)}


