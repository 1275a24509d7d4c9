"""spark/options.py: the data source's options parsed and checked (sizes, times, offsets, the
store's configuration keys), each refusal naming its option."""
from __future__ import annotations

import pytest

from rmqstore.errors import ConfigError
from rmqstore.spark.options import broker_name_of, parse_options, parse_size, parse_timestamp
from tests.kit import load_vector


def test_bad_options_are_config_errors():
    path = load_vector("basic").path
    with pytest.raises(ConfigError, match="endingOffsets"):
        parse_options({"path": path, "startingOffsets": "10", "endingOffsets": "5"}, streaming=False)
    with pytest.raises(ConfigError, match="endingOffsets"):
        parse_options({"path": path, "endingOffsets": "5"}, streaming=True)
    with pytest.raises(ConfigError, match="enabledAppendPropCRC"):
        parse_options({"path": path, "enabledappendpropcrc": "yes"}, streaming=False)
    with pytest.raises(ConfigError, match="path"):
        parse_options({}, streaming=False)
    opts = parse_options({"path": path, "maxindexnum": "256", "splitSize": "2k"}, streaming=None)
    assert (opts.cfg.max_index_num, opts.split_size, opts.seg_size) == (256, 2048, 65536)


@pytest.mark.parametrize("value, want", [
    ("67108864", 67108864), ("64m", 64 << 20), ("64M", 64 << 20), ("2k", 2048), ("2KiB", 2048), ("1g", 1 << 30),
    (" 3 kb ", 3072), ("1t", 1 << 40), ("100b", 100), (4096, 4096),
])
def test_parse_size_takes_binary_units(value, want):
    assert parse_size("splitSize", value) == want


@pytest.mark.parametrize("value", ["", "64x", "-1", "1.5m", True, "m"])
def test_parse_size_refuses_what_is_not_a_size(value):
    with pytest.raises(ConfigError, match="splitSize"):
        parse_size("splitSize", value)


def test_parse_size_minimum():
    assert parse_size("splitSize", "64", minimum=64) == 64
    with pytest.raises(ConfigError, match="at least 64"):
        parse_size("splitSize", "63", minimum=64)


@pytest.mark.parametrize("value, want", [
    ("1700000000000", 1_700_000_000_000), ("0", 0),
    ("1970-01-01T00:00:01Z", 1000), ("1970-01-01T00:00:01", 1000),      # no offset: UTC
    ("1970-01-01T01:00:00+01:00", 0), ("2024-01-31T12:00:00.250Z", 1_706_702_400_250),
])
def test_parse_timestamp(value, want):
    assert parse_timestamp("startingTimestamp", value) == want


def test_parse_timestamp_refuses_text():
    with pytest.raises(ConfigError, match="startingTimestamp"):
        parse_timestamp("startingTimestamp", "yesterday")


def test_broker_name_from_broker_conf_else_the_directory(tmp_path):
    store = tmp_path / "broker-b"
    store.mkdir()
    assert broker_name_of(str(store)) == "broker-b"
    assert broker_name_of(str(store) + "/") == "broker-b"
    (store / "config").mkdir()
    (store / "config" / "broker.conf").write_text("brokerName = from-config\n")
    assert broker_name_of(str(store)) == "from-config"
    (store / "broker.conf").write_text("brokerName=beside-the-store\n")
    assert broker_name_of(str(store)) == "beside-the-store"
