"""The broker's traffic counters: one update per put or pull result (a batch counts its messages and
bytes once), message types as ``BrokerMetricsManager.getMessageType`` tells them, size buckets."""
from __future__ import annotations

from rmqstore.broker.traffic import SIZE_BUCKETS, Traffic, is_retry_or_dlq, is_system_group, is_system_topic, \
    message_type
from rmqstore.types import Message


def m(topic="T", sys_flag=0, **props) -> Message:
    return Message(topic=topic, body=b"x", sys_flag=sys_flag, properties=props)


def test_message_types():
    assert message_type(m()) == "normal"
    assert message_type(m(sys_flag=0x4)) == "transaction"  # TRANSACTION_PREPARED_TYPE
    assert message_type(m(__SHARDINGKEY="k")) == "fifo"
    assert message_type(m(DELAY="3")) == "delay" and message_type(m(TIMER_DELIVER_MS="1")) == "delay"
    assert message_type(Message(topic="T", body=b"x", properties=[("KEYS", "a"), ("__STARTDELIVERTIME", "1")])) \
        == "delay"


def test_put_counts_a_batch_once_and_buckets_its_mean_size():
    t = Traffic()
    t.put(m(), 10, 10 * 2000)  # a batch of ten 2000-byte records: one observation of 2000
    t.put(m(), 1, 100)
    t.put(m(), 1, 5 * 1024 * 1024)  # past the last bucket: +Inf
    row = t.inbound[("T", "normal")]
    assert row[:2] == [12, 20000 + 100 + 5 * 1024 * 1024]
    buckets = row[2:2 + len(SIZE_BUCKETS) + 1]
    assert buckets == [1, 1, 0, 0, 0, 0, 1] and row[-1] == 3 and row[-2] == 2000 + 100 + 5 * 1024 * 1024
    assert t.puts == 12


def test_out_and_dlq():
    t = Traffic()
    t.out("T", "G", 32, 4096)
    t.out("T", "G", 3, 300)
    t.to_dlq("G", "T")
    t.to_dlq("G", "T")
    assert t.outbound[("T", "G")] == [35, 4396] and t.gets == 35 and t.dlq[("G", "T")] == 2


def test_system_and_retry_names():
    assert is_system_topic("TBW102") and is_system_topic("rmq_sys_wheel_timer") and not is_system_topic("Orders")
    assert is_system_group("CID_RMQ_SYS_TRANS") and not is_system_group("CG")
    assert is_retry_or_dlq("%RETRY%CG") and is_retry_or_dlq("%DLQ%CG") and not is_retry_or_dlq("T")


def test_the_broker_runs_without_the_http_extra():
    """``import rmqstore.broker`` (and a broker without ``http=``) loads neither aiohttp nor
    prometheus_client: the core install does not need the ``http`` extra."""
    import subprocess
    import sys
    code = ("import sys; from rmqstore.broker import Broker, BrokerConfig; import rmqstore.broker.traffic; "
            "import rmqstore.broker.http; "
            "print(sorted(m for m in ('aiohttp', 'prometheus_client') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
