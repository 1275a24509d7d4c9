"""cli/common.py: the time and NAME=VALUE parameters, and how one invocation resolves its store
and configuration."""
from __future__ import annotations

import os
import time

import click
import pytest

from rmqstore import MessageStoreConfig, StoreNotFoundError
from rmqstore.cli.common import DEFAULT_STORE, KEY_VALUE, TIME, StoreCommand, parse_time_ms
from rmqstore.cli.errors import CliError, ExitCode
from rmqstore.layout import is_store_dir


@pytest.mark.parametrize("text, want", [
    ("1700000000037", 1_700_000_000_037), ("  42 ", 42), ("-5", -5),
    ("2023-11-14T22:13:20Z", 1_700_000_000_000), ("2023-11-14T22:13:20.037z", 1_700_000_000_037),
    ("2023-11-14 23:13:20.037+01:00", 1_700_000_000_037),
])
def test_parse_time_ms(text, want):
    assert parse_time_ms(text) == want


def test_parse_time_ms_now_and_local_time():
    assert abs(parse_time_ms("now") - time.time() * 1000) < 5_000
    local = parse_time_ms("2023-11-14T22:13:20")  # no offset: the machine's local time
    assert local == int(time.mktime((2023, 11, 14, 22, 13, 20, 0, 0, -1)) * 1000)


def test_parse_time_ms_refuses_text():
    with pytest.raises(ValueError, match="neither epoch milliseconds nor an ISO time"):
        parse_time_ms("yesterday")


def test_time_and_key_value_parameters():
    assert TIME.convert(5, None, None) == 5 and TIME.convert("1700000000037", None, None) == 1_700_000_000_037
    with pytest.raises(click.BadParameter):
        TIME.convert("soon", None, None)
    assert KEY_VALUE.convert("a=b=c", None, None) == ("a", "b=c")
    assert KEY_VALUE.convert("a=", None, None) == ("a", "")
    for bad in ("=v", "novalue"):
        with pytest.raises(click.BadParameter):
            KEY_VALUE.convert(bad, None, None)


def test_the_store_path_comes_from_the_option_the_broker_conf_or_the_default(tmp_path):
    assert StoreCommand("s1", None, False).store_path == "s1"
    assert StoreCommand(None, None, False).store_path == DEFAULT_STORE == os.path.join("data", "store")
    conf = tmp_path / "broker.conf"
    conf.write_text("storePathRootDir=~/rmq-store\n")
    assert StoreCommand(None, str(conf), True).store_path == os.path.expanduser("~/rmq-store")
    assert StoreCommand("given", str(conf), True).store_path == "given"
    assert StoreCommand("s", None, True).json and not StoreCommand("s", None, False).json


def test_the_config_is_the_embedded_preset_or_the_broker_conf(tmp_path):
    assert StoreCommand(str(tmp_path / "new"), None, False).config() == MessageStoreConfig.embedded()
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=8192\nmaxIndexNum=40\n")
    got = StoreCommand(str(tmp_path / "new"), str(conf), False).config()
    assert got == MessageStoreConfig.from_properties({"mappedFileSizeCommitLog": "8192", "maxIndexNum": "40"})


def test_open_write_refuses_what_is_not_a_store(tmp_path):
    with pytest.raises(CliError) as ei:
        StoreCommand(str(tmp_path / "missing"), None, False).open_write()
    assert ei.value.code == ExitCode.STORE_NOT_FOUND
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.txt").write_text("x")
    with pytest.raises(StoreNotFoundError, match="non-empty directory"):
        StoreCommand(str(tmp_path / "docs"), None, False).open_write(create=True)
    assert os.listdir(tmp_path / "docs") == ["notes.txt"]
    with StoreCommand(str(tmp_path / "new"), None, False).open_write(create=True) as st:
        assert not st.read_only
    assert is_store_dir(str(tmp_path / "new"))
