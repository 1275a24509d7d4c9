"""MessageStoreConfig (config.py): RocketMQ's defaults, broker.conf read as the broker reads it
(java.util.Properties syntax, MixAll.properties2Object's judgement), mappings, refusals."""
from __future__ import annotations

import dataclasses

import pytest

from rmqstore import ConfigError, MessageStoreConfig


def test_config_defaults_are_upstream():
    c = MessageStoreConfig()
    assert (c.mapped_file_size_commit_log, c.mapped_file_size_consume_queue, c.max_hash_slot_num,
            c.max_index_num, c.max_msgs_num_batch, c.max_message_size, c.flush_disk_type) == (
        1073741824, 6000000, 5000000, 20000000, 64, 4194304, "ASYNC_FLUSH")
    assert c.cq_file_size == 6000000 and c.index_file_size == 420000040
    assert c.delay_levels_ms[0] == 1000 and c.delay_levels_ms[-1] == 7_200_000 and len(c.delay_levels_ms) == 18
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.max_index_num = 5


def test_config_from_mapping_with_camel_case_strings():
    c = MessageStoreConfig.from_properties({
        "mappedFileSizeCommitLog": "65536", "mappedFileSizeConsumeQueue": 1000, "maxHashSlotNum": "64",
        "maxIndexNum": "256", "enabledAppendPropCRC": "true", "checkCRCOnRecover": False,
        "flushDiskType": "SYNC_FLUSH", "enableCompaction": "false", "brokerIP1": "10.0.0.9",
        "listenPort": "10999", "someUnknownKey": "ignored",
    })
    assert (c.mapped_file_size_commit_log, c.cq_file_size, c.max_hash_slot_num, c.max_index_num) == (
        65536, 1000, 64, 256)
    assert c.enabled_append_prop_crc is True and c.check_crc_on_recover is False and c.sync_flush
    assert c.store_host == "10.0.0.9:10999"


def test_config_from_broker_conf_file(tmp_path):
    p = tmp_path / "broker.conf"
    p.write_text("# comment\n! also a comment\nmappedFileSizeCommitLog = 8192\n"
                 "maxIndexNum: 40\nmessageDelayLevel=1s 2m\n\ndeleteWhen=04;05\n", encoding="utf-8")
    c = MessageStoreConfig.from_properties(str(p), max_hash_slot_num=10)
    assert (c.mapped_file_size_commit_log, c.max_index_num, c.max_hash_slot_num) == (8192, 40, 10)
    assert c.delay_levels_ms == (1000, 120_000) and c.delete_when == "04;05"


def test_broker_conf_is_read_as_rocketmqs_broker_reads_it(tmp_path, caplog):
    """Properties.load syntax (blank separator, continuation, escapes, ISO-8859-1) and
    MixAll.properties2Object's judgement: exact keys, Integer.parseInt, String.trim."""
    p = tmp_path / "broker.conf"
    p.write_bytes(b"maxIndexNum 40\nmappedFileSizeCommitLog=+8\\\n   192\ndeleteWhen=04\\u003b05\n"
                  b"flushDiskType=\tSYNC_FLUSH\t\nmessageIndexEnable=FALSE\nMaxHashSlotNum=99\n"
                  b"brokerIP1=10.1.2.3\nmessageDelayLevel=1s\xe9\n")
    with caplog.at_level("WARNING", logger="rmqstore"):
        with pytest.raises(ConfigError, match="bad level .1s\u00e9."):  # ISO-8859-1: 0xE9 is é, no time unit
            MessageStoreConfig.from_properties(str(p))
    p.write_bytes(p.read_bytes().replace(b"1s\xe9", b"1s"))
    with caplog.at_level("WARNING", logger="rmqstore"):
        c = MessageStoreConfig.from_properties(str(p))
    assert (c.max_index_num, c.mapped_file_size_commit_log, c.delete_when) == (40, 8192, "04;05")
    assert c.sync_flush and c.message_index_enable is False
    assert c.max_hash_slot_num == MessageStoreConfig().max_hash_slot_num  # wrong case: the broker ignores it
    assert any("'MaxHashSlotNum' is not RocketMQ's spelling 'maxHashSlotNum'" in r.getMessage() for r in caplog.records)
    assert c.store_host == "10.1.2.3:10911"


@pytest.mark.parametrize("line,why", [
    ("mappedFileSizeCommitLog=8192 ", "Integer.parseInt"),   # Java keeps the trailing blank: the broker ignores it
    ("mappedFileSizeCommitLog=1_024", "Integer.parseInt"),
    ("mappedFileSizeCommitLog=0x2000", "Integer.parseInt"),
    ("mappedFileSizeCommitLog=3000000000", "Integer.parseInt"),  # beyond a Java int
    ("messageIndexEnable=true ", "Boolean.parseBoolean"),     # the broker would read false
    ("messageIndexEnable=yes", "Boolean.parseBoolean"),
    ("listenPort=10911x\nbrokerIP1=1.2.3.4", "listenPort"),
])
def test_broker_conf_values_java_would_not_take_are_refused(tmp_path, line, why):
    p = tmp_path / "broker.conf"
    p.write_text(line + "\n", encoding="latin-1")
    with pytest.raises(ConfigError, match=why):
        MessageStoreConfig.from_properties(str(p))


def test_a_mapping_takes_snake_case_and_python_values():
    c = MessageStoreConfig.from_properties({"mapped_file_size_commit_log": 4096, "messageIndexEnable": False,
                                            "max_index_num": "+64"})
    assert (c.mapped_file_size_commit_log, c.message_index_enable, c.max_index_num) == (4096, False, 64)
    with pytest.raises(ConfigError, match="outside a Java int"):
        MessageStoreConfig.from_properties({"maxIndexNum": 1 << 40})


@pytest.mark.parametrize("bad", [
    {"mappedFileSizeCommitLog": "big"}, {"enabledAppendPropCRC": "yes"}, {"maxIndexNum": "1"},
    {"flushDiskType": "SOMETIMES"}, {"mappedFileSizeCommitLog": "0"}, {"messageDelayLevel": "1x"},
    {"enableConsumeQueueExt": "true"}, {"maxHashSlotNum": True},
])
def test_config_rejects_bad_values(bad):
    with pytest.raises(ConfigError):
        MessageStoreConfig.from_properties(bad)


def test_config_file_missing(tmp_path):
    with pytest.raises(ConfigError) as ei:
        MessageStoreConfig.from_properties(str(tmp_path / "nope.conf"))
    assert ei.value.path == str(tmp_path / "nope.conf")
