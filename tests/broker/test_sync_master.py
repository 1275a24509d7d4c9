"""A SYNC_MASTER broker answers a send once a slave has it (SUCCESS), FLUSH_SLAVE_TIMEOUT (12) when
its slave stalls past slaveTimeout, SLAVE_NOT_AVAILABLE (11) without a slave, as RocketMQ's
SendMessageProcessor maps the store's statuses; the event loop keeps serving meanwhile."""
from __future__ import annotations

import threading
import time

from rmqstore.broker import remoting as R
from rmqstore.message_store import MessageStore
from tests import netkit

from .conftest import broker_store_config

RC = R.ResponseCode


def until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_sync_master_send_codes(start_broker, connect, send_v2, tmp_path):
    b = start_broker(broker_role="SYNC_MASTER", slave_timeout=1500, ha_send_heartbeat_interval=200,
                     ha_reconnect_interval=100)
    ha = b.store.start_ha("127.0.0.1", 0)
    c = connect(b.address)
    r = send_v2(c, "Orders", b"alone")
    assert r.code == RC.SLAVE_NOT_AVAILABLE               # stored, but no slave has it
    proxy = netkit.TcpProxy(ha.address)
    slave = MessageStore.open(tmp_path / "slave", broker_store_config(broker_role="SLAVE", ha_master_address=proxy.addr,
                                                                       ha_reconnect_interval=100))
    try:
        slave.start_ha()
        until(lambda: ha.slaves() and ha.slaves()[0][1] >= 0)
        r = send_v2(c, "Orders", b"replicated")
        assert r.code == RC.SUCCESS
        end = b.store.commit_log.confirm_offset
        assert slave.commit_log.confirm_offset == end and ha.push_to_slave_max_offset() == end
        proxy.stall()
        t0 = time.monotonic()
        answers = []
        t = threading.Thread(target=lambda: answers.append(send_v2(c, "Orders", b"stalled")))
        t.start()
        time.sleep(0.1)
        other = connect(b.address).call(R.RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"})
        assert other.code == RC.SUCCESS and not answers   # served while the send waits for the slave
        t.join(5)
        assert answers[0].code == RC.FLUSH_SLAVE_TIMEOUT and time.monotonic() - t0 >= 1.4
        proxy.resume()
        until(lambda: slave.commit_log.confirm_offset == b.store.commit_log.confirm_offset)
        assert send_v2(c, "Orders", b"again").code == RC.SUCCESS
    finally:
        slave.close()
        proxy.close()
