"""layout.py: what a directory holds, and segment sizes inferred from the files themselves
(FORMAT.md §1.2: segments named by their 20-digit start offset, index files 40 + slots*4 +
items*20 bytes). The directories are built by hand here, so the expected sizes are known."""
from __future__ import annotations

import os

import pytest

from rmqstore import ConfigError, Message, MessageStore, MessageStoreConfig, StoreNotFoundError
from rmqstore.layout import check_geometry, infer_config, is_store_dir, resolve_config
from tests.kit import load_vector


def _segments(directory, starts, size: int) -> None:
    os.makedirs(directory, exist_ok=True)
    for s in starts:
        with open(os.path.join(directory, f"{s:020d}"), "wb") as fh:
            fh.truncate(size)


def _index_file(store, slots: int, items: int, name="20240131235959123") -> None:
    os.makedirs(store / "index", exist_ok=True)
    with open(store / "index" / name, "wb") as fh:
        fh.truncate(40 + slots * 4 + items * 20)


def test_is_store_dir(tmp_path):
    assert not is_store_dir(str(tmp_path / "missing"))
    assert not is_store_dir(str(tmp_path))
    (tmp_path / "notes.txt").write_text("x")
    assert not is_store_dir(str(tmp_path))
    for marker in ("lock", "checkpoint"):
        d = tmp_path / marker
        d.mkdir()
        (d / marker).write_bytes(b"")
        assert is_store_dir(str(d))
    for marker in ("commitlog", "consumequeue"):
        d = tmp_path / ("d-" + marker)
        (d / marker).mkdir(parents=True)
        assert is_store_dir(str(d))


def test_sizes_come_from_the_files(tmp_path):
    store = tmp_path / "s"
    _segments(store / "commitlog", [0], 8192)
    _segments(store / "consumequeue" / "T" / "0", [0], 1000)
    _index_file(store, 16, 64)
    cfg = infer_config(str(store))
    assert (cfg.mapped_file_size_commit_log, cfg.cq_file_size, cfg.max_hash_slot_num, cfg.max_index_num) == (
        8192, 1000, 16, 64)
    default = MessageStoreConfig()
    assert cfg.replace(mapped_file_size_commit_log=default.mapped_file_size_commit_log,
                       mapped_file_size_consume_queue=default.mapped_file_size_consume_queue,
                       max_hash_slot_num=default.max_hash_slot_num, max_index_num=default.max_index_num) == default


def test_the_name_spacing_wins_over_a_damaged_files_length(tmp_path):
    """Segment k+1 starts exactly fileSize after segment k: with two segments the names say the size
    even when a file was cut short."""
    store = tmp_path / "s"
    _segments(store / "commitlog", [0, 4096, 8192], 100)
    _segments(store / "consumequeue" / "T" / "3", [0, 200], 20)
    cfg = infer_config(str(store))
    assert (cfg.mapped_file_size_commit_log, cfg.cq_file_size) == (4096, 200)


def test_an_index_size_without_upstreams_ratio_is_read_from_its_keys(tmp_path):
    store = tmp_path / "s"
    cfg = MessageStoreConfig.embedded().replace(max_hash_slot_num=100, max_index_num=1000)
    with MessageStore.open(str(store), cfg) as st:
        for i in range(50):
            st.put_message(Message.create("T", b"x", keys=[f"k{i}"]))
        st.wait_dispatched()
    got = infer_config(str(store))
    assert (got.max_hash_slot_num, got.max_index_num) == (100, 1000)
    with MessageStore.open(str(store), read_only=True) as ro:  # and a store opened without a config reads it
        assert len(ro.query_message("T", "k7").messages) == 1


def test_an_index_size_without_upstreams_ratio_and_no_keys_asks_for_the_keys(tmp_path):
    store = tmp_path / "s"
    _segments(store / "commitlog", [0], 4096)
    _index_file(store, 10, 7)  # 40 + 40 + 140: not 40 + 84 * slots, and no item written
    with pytest.raises(ConfigError) as e:
        infer_config(str(store), MessageStoreConfig(max_hash_slot_num=64, max_index_num=256))
    assert "220 bytes, not upstream's 1:4 slot:item ratio" in str(e.value)
    assert "maxHashSlotNum and maxIndexNum (40 + 4*maxHashSlotNum + 20*maxIndexNum = 220)" in str(e.value)
    assert str(store / "index") in str(e.value)


def test_infer_config_of_no_directory(tmp_path):
    with pytest.raises(StoreNotFoundError):
        infer_config(str(tmp_path / "missing"))


def test_check_geometry_names_both_sizes(tmp_path):
    store = tmp_path / "s"
    _segments(store / "commitlog", [0], 8192)
    check_geometry(str(store), MessageStoreConfig(mapped_file_size_commit_log=8192))
    with pytest.raises(ConfigError, match="8192.*4096|4096.*8192"):
        check_geometry(str(store), MessageStoreConfig(mapped_file_size_commit_log=4096))


def test_resolve_config(tmp_path):
    new = str(tmp_path / "new")
    assert resolve_config(new, None) == MessageStoreConfig.embedded()
    given = MessageStoreConfig(mapped_file_size_commit_log=4096)
    assert resolve_config(new, given) is given
    store = tmp_path / "s"
    _segments(store / "commitlog", [0], 8192)
    assert resolve_config(str(store), None).mapped_file_size_commit_log == 8192
    with pytest.raises(ConfigError):
        resolve_config(str(store), given)


@pytest.mark.parametrize("name", ["basic", "propcrc", "rollover"])
def test_rocketmqs_stores_give_back_the_sizes_they_were_written_with(name):
    vs = load_vector(name)
    want, got = vs.config, infer_config(vs.path)
    assert (got.mapped_file_size_commit_log, got.cq_file_size, got.index_file_size) == (
        want.mapped_file_size_commit_log, want.cq_file_size, want.index_file_size)


def test_sizes_from_listings_follow_one_rule_for_local_and_remote_stores():
    from rmqstore.layout import config_with_sizes, cq_segment_size_of, index_size_of, segment_size_of

    seg = lambda start: f"{start:020d}"  # noqa: E731
    assert segment_size_of([(seg(0), 4096), (seg(4096), 100), (seg(12288), 4096)]) == 4096  # spacing, not sizes
    assert segment_size_of([(seg(0), 0), ("notes", 9)]) is None
    assert segment_size_of([(seg(0), 1000)]) == 1000
    queues = {("A", "0"): [(seg(0), 1000)], ("B", "1"): [(seg(0), 600), (seg(600), 600)], ("B", "x"): [(seg(0), 5)]}
    assert cq_segment_size_of(queues) == 600  # a queue with several files names the size
    assert cq_segment_size_of({("A", "0"): [(seg(0), 1000)], ("A", "1"): [(seg(0), 7)]}) == 1000
    assert index_size_of([("20240101000000000", 40 + 84 * 10), ("20240101000000001", 40 + 84 * 10),
                          ("20240101000000002", 99)]) == 40 + 84 * 10
    cfg = config_with_sizes(MessageStoreConfig(), 1 << 20, 1000, 40 + 84 * 10)
    assert (cfg.mapped_file_size_commit_log, cfg.cq_file_size, cfg.max_hash_slot_num, cfg.max_index_num) == \
           (1 << 20, 1000, 10, 40)
    assert config_with_sizes(MessageStoreConfig(), None, None, None) == MessageStoreConfig()


def test_config_with_geometry_asks_the_first_index_file_of_the_common_size_that_tells():
    """The rule local and remote stores share: only when the index files' size is not the config's,
    the files of that size in name order until one tells; the local error when none does."""
    from rmqstore.layout import config_with_geometry

    size = 40 + 4 * 10 + 20 * 7
    files = [("20240102000000000", size), ("20240101000000000", size), ("notes", size),
             ("20240103000000000", 99), ("20240104000000000", size)]
    asked = []

    def geometry_of(name, n):
        asked.append((name, n))
        return (10, 7) if name == "20240102000000000" else None

    base = MessageStoreConfig()
    got = config_with_geometry(base, files, geometry_of, "s3://b/s/index")
    assert (got.max_hash_slot_num, got.max_index_num) == (10, 7) and got.replace(
        max_hash_slot_num=base.max_hash_slot_num, max_index_num=base.max_index_num) == base
    assert asked == [("20240101000000000", size), ("20240102000000000", size)]
    asked.clear()
    fitting = base.replace(max_hash_slot_num=10, max_index_num=7)
    assert config_with_geometry(fitting, files, geometry_of, "x") is fitting and asked == []
    assert config_with_geometry(base, [], geometry_of, "x") is base and asked == []
    with pytest.raises(ConfigError) as e:
        config_with_geometry(base, files, lambda name, n: None, "s3://b/s/index")
    assert e.value.path == "s3://b/s/index" and f"maxIndexNum (40 + 4*maxHashSlotNum + 20*maxIndexNum = {size})" in \
        str(e.value)
