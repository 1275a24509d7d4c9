"""put_messages (whichever internal path it takes) writes exactly the bytes that the same
messages put one at a time write, when they share a store time and fit one segment."""
from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqstore import Message, MessageStore, MessageStoreConfig, PutMessageStatus

T0 = 1_700_000_000_000
#: memory-backed scratch space where there is one: many small stores are opened and closed (fsync)
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
hosts = st.sampled_from(["10.0.0.1:10911", "192.168.1.20:50000", "[::1]:10911", "[2001:db8::7]:1"])
props = st.lists(st.tuples(st.sampled_from(["TAGS", "KEYS", "a", "long"]),
                           st.text("xyz 中", min_size=1, max_size=20)), max_size=4)
values = st.text("xyz 中{}", min_size=1, max_size=20) | st.integers(0, 99) | st.none()
message = st.fixed_dictionaries({
    # a long body makes the batch large enough to be written with pwrite rather than through the mapping
    "body": st.binary(max_size=200) | st.binary(min_size=3000, max_size=4000), "props": props,
    "values": st.lists(values, min_size=3, max_size=3), "flag": st.integers(-2**31, 2**31 - 1),
    "sys_flag": st.sampled_from([0, 0x1, 0x2, 0x30]), "born_host": hosts,
    "born_timestamp": st.none() | st.integers(0, 2**62), "reconsume_times": st.integers(0, 16),
})
uniform_keys = st.lists(st.sampled_from(["KEYS", "UNIQ_KEY", "TAGS", "a{b}", "DELAY"]), unique=True, max_size=3)
batch = st.fixed_dictionaries({
    "topic": st.sampled_from(["T", "t" * 127, "u" * 128, "w" * 255]),
    "queue_id": st.integers(0, 3),
    "store_host": hosts,
    "same_born_host": st.booleans(),
    "crc": st.booleans(),
    # pairs: the general path; dicts with the same keys in the same order: the vectorised one
    "props_style": st.sampled_from(["pairs", "dict", "uniform"]),
    "uniform_keys": uniform_keys,
    "messages": st.lists(message, min_size=1, max_size=6),
})


def _props(b, m):
    if b["props_style"] == "pairs":
        return list(m["props"]) or None
    if b["props_style"] == "dict":
        return dict(m["props"])
    return dict(zip(b["uniform_keys"], m["values"]))


def _messages(b):
    out = []
    for m in b["messages"]:
        out.append(Message(topic=b["topic"], body=m["body"], queue_id=b["queue_id"], flag=m["flag"],
                           sys_flag=m["sys_flag"], properties=_props(b, m),
                           born_host=b["messages"][0]["born_host"] if b["same_born_host"] else m["born_host"],
                           born_timestamp=m["born_timestamp"], store_host=b["store_host"], store_timestamp=T0,
                           reconsume_times=m["reconsume_times"]))
    return out


def _files(root):
    out = {}
    for dp, _, fs in os.walk(root):
        for f in fs:
            rel = os.path.relpath(os.path.join(dp, f), root)
            if rel.split(os.sep)[0] in ("commitlog", "consumequeue"):
                with open(os.path.join(dp, f), "rb") as fh:
                    out[rel] = fh.read()
    index = sorted(os.listdir(os.path.join(root, "index")))
    for i, n in enumerate(index):
        with open(os.path.join(root, "index", n), "rb") as fh:
            out[f"index#{i}"] = fh.read()
    return out


#: the shape the vectorised path takes (IPv4 hosts shared by the batch, a V1 topic, no properties
#: CRC, dict properties); values, bodies, flags and timestamps still vary
fast_batch = st.fixed_dictionaries({
    "topic": st.sampled_from(["T", "t" * 127]), "queue_id": st.integers(0, 3),
    "store_host": st.sampled_from(["10.0.0.1:10911", "192.168.1.20:50000"]), "same_born_host": st.just(True),
    "crc": st.just(False), "props_style": st.sampled_from(["dict", "uniform", "uniform"]),
    "uniform_keys": uniform_keys,
    "messages": st.lists(message.map(lambda m: {**m, "sys_flag": m["sys_flag"] & 0x3,
                                                "born_host": "10.0.0.1:10911"}), min_size=1, max_size=6),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch, st.integers(0, 2))
def test_batch_equals_singles(b, before):
    _check_batch_equals_singles(b, before)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fast_batch, st.integers(0, 2))
def test_vectorised_batch_equals_singles(b, before):
    _check_batch_equals_singles(b, before)


def _asks_for_a_delay(v) -> bool:
    """What upstream's getDelayTimeLevel makes of a DELAY value: Integer.parseInt (no trimming: " "
    is no number, and the batch is refused as for a real delay); an empty value is dropped."""
    from rmqstore.format.javalang import parse_int
    text = str(v)
    if text == "":
        return False
    try:
        return parse_int(text) > 0
    except ValueError:
        return True


def _check_batch_equals_singles(b, before):
    cfg = MessageStoreConfig(mapped_file_size_commit_log=1 << 16, mapped_file_size_consume_queue=200,
                             max_hash_slot_num=8, max_index_num=32, enabled_append_prop_crc=b["crc"])
    d = tempfile.mkdtemp(prefix="rmq-batch-", dir=SCRATCH)
    try:
        with MessageStore.open(os.path.join(d, "a"), cfg) as sa, MessageStore.open(os.path.join(d, "b"), cfg) as sb:
            for st_ in (sa, sb):  # some earlier messages so offsets are not zero
                for i in range(before):
                    st_.put_message(Message(topic=b["topic"], body=b"p" * i, queue_id=b["queue_id"],
                                            store_timestamp=T0 - 1))
            ra = sa.put_messages(_messages(b))
            if ra.status is PutMessageStatus.MESSAGE_ILLEGAL:  # a DELAY value that asks for a delay
                assert any(_asks_for_a_delay(v) for m in _messages(b) for k, v in
                           (m.properties.items() if isinstance(m.properties, dict) else m.properties or ())
                           if k == "DELAY" and v is not None), ra.error
                return
            rb = [sb.put_message(m) for m in _messages(b)]
            assert ra.status is PutMessageStatus.PUT_OK and all(r.status is PutMessageStatus.PUT_OK for r in rb)
            assert (ra.phy_offset, ra.queue_offset, ra.store_timestamp, ra.msg_num) == (
                rb[0].phy_offset, rb[0].queue_offset, T0, len(rb))
            assert ra.wrote_bytes == sum(r.wrote_bytes for r in rb)
            assert ra.msg_id.split(",") == [r.msg_id for r in rb]
            sa.wait_dispatched()
            sb.wait_dispatched()
        fa, fb = _files(os.path.join(d, "a")), _files(os.path.join(d, "b"))
        assert fa.keys() == fb.keys()
        for k in fa:
            assert fa[k] == fb[k], k
    finally:
        shutil.rmtree(d, ignore_errors=True)
