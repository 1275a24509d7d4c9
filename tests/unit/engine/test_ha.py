"""engine/ha/__init__.py: the service a store owns (``start_ha`` / ``ha`` / stopped at close)."""
from __future__ import annotations

import socket
import time

import pytest

from rmqstore.config import MessageStoreConfig
from rmqstore.engine import ha as HA
from rmqstore.errors import ConfigError, ReadOnlyStoreError
from rmqstore.message_store import MessageStore
from rmqstore.types import Message

SMALL = dict(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=4000, max_hash_slot_num=64,
             max_index_num=512)


def test_the_store_owns_its_ha_service(tmp_path):
    st = MessageStore.open(str(tmp_path / "m"), MessageStoreConfig(**SMALL))
    assert st.ha is None                       # an embedded store never starts HA by itself
    ha = st.start_ha("127.0.0.1", 0)
    assert isinstance(ha, HA.HAService) and st.ha is ha and st.start_ha() is ha
    host, port = ha.address
    assert host == "127.0.0.1" and port > 0
    socket.create_connection((host, port), timeout=2).close()
    st.stop_ha()                               # stopped by whoever started it...
    assert st.ha is None
    with pytest.raises(OSError):
        socket.create_connection((host, port), timeout=2).close()
    again = st.start_ha("127.0.0.1", 0)        # ...and started again
    assert again is not ha and st.ha is again
    st.close()                                 # close stops it too
    with pytest.raises(OSError):
        socket.create_connection(again.address, timeout=2).close()


def test_a_read_only_store_cannot_replicate(tmp_path):
    MessageStore.open(str(tmp_path / "m"), MessageStoreConfig(**SMALL)).close()
    with MessageStore.open(str(tmp_path / "m"), MessageStoreConfig(**SMALL), read_only=True) as ro:
        with pytest.raises(ReadOnlyStoreError):
            ro.start_ha()


def test_config_keys_are_rocketmqs():
    cfg = MessageStoreConfig.from_properties({
        "brokerRole": "SYNC_MASTER", "haListenPort": "20912", "haMasterAddress": "10.0.0.1:10912",
        "haSendHeartbeatInterval": "1000", "haHousekeepingInterval": "4000", "haTransferBatchSize": "65536",
        "haMaxGapNotInSync": "1024", "slaveTimeout": "500", "inSyncReplicas": "2", "totalReplicas": "3"})
    assert (cfg.broker_role, cfg.ha_listen_port, cfg.ha_master_address, cfg.ha_send_heartbeat_interval,
            cfg.ha_housekeeping_interval, cfg.ha_transfer_batch_size, cfg.ha_max_gap_not_in_sync, cfg.slave_timeout,
            cfg.in_sync_replicas, cfg.total_replicas) == ("SYNC_MASTER", 20912, "10.0.0.1:10912", 1000, 4000, 65536,
                                                          1024, 500, 2, 3)
    defaults = MessageStoreConfig()
    assert (defaults.broker_role, defaults.ha_listen_port, defaults.ha_transfer_batch_size,
            defaults.ha_max_gap_not_in_sync, defaults.slave_timeout) == ("ASYNC_MASTER", 10912, 32768, 256 << 20, 3000)
    with pytest.raises(ConfigError, match="broker_role"):
        MessageStoreConfig(broker_role="MASTER")
    with pytest.raises(ConfigError, match="ha_transfer_batch_size"):
        MessageStoreConfig(ha_transfer_batch_size=8 << 20)


def test_ipv6_master_and_slave(tmp_path):
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    m = MessageStore.open(str(tmp_path / "m"), MessageStoreConfig(**SMALL))
    try:
        try:
            ha = m.start_ha("::1", 0)
        except OSError as e:
            pytest.skip(f"no IPv6 loopback here: {e}")
        m.put_message(Message.create("T", b"six", queue_id=0))
        cfg = MessageStoreConfig(**SMALL, broker_role="SLAVE", ha_master_address=f"[::1]:{ha.address[1]}")
        with MessageStore.open(str(tmp_path / "s"), cfg) as s:
            s.start_ha()
            deadline = time.monotonic() + 10
            while s.commit_log.confirm_offset < m.commit_log.confirm_offset:
                assert time.monotonic() < deadline
                time.sleep(0.02)
    finally:
        m.close()
