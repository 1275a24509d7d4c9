"""io/paths.py: the store's file and directory names as FORMAT.md §1.1 lists them, and the paths
built from them."""
from __future__ import annotations

import os

from rmqstore.io import paths as P

S = os.path.join("data", "broker-a")


def test_names_are_rocketmqs():
    assert (P.COMMITLOG, P.CONSUMEQUEUE, P.INDEX, P.CHECKPOINT, P.ABORT, P.LOCK, P.CONFIG) == (
        "commitlog", "consumequeue", "index", "checkpoint", "abort", "lock", "config")
    assert P.CONSUMER_OFFSET_FILE == os.path.join("config", "consumerOffset.json")
    assert P.TOPICS_FILE == os.path.join("config", "topics.json")
    assert P.SUBSCRIPTION_GROUP_FILE == os.path.join("config", "subscriptionGroup.json")
    assert P.DELAY_OFFSET_FILE == os.path.join("config", "delayOffset.json")


def test_rmqstores_own_files_live_under_config():
    for name in (P.QUEUE_EXTENTS_FILE, P.INDEX_STATS_FILE, P.TIMER_STATE_FILE):
        head, tail = os.path.split(name)
        assert head == "config" and tail.endswith(".json")
    assert len({P.QUEUE_EXTENTS_FILE, P.INDEX_STATS_FILE, P.TIMER_STATE_FILE, P.CONSUMER_OFFSET_FILE,
                P.TOPICS_FILE, P.SUBSCRIPTION_GROUP_FILE, P.DELAY_OFFSET_FILE}) == 7


def test_paths_of_a_store():
    assert P.commitlog_dir(S) == os.path.join("data", "broker-a", "commitlog")
    assert P.index_dir(S) == os.path.join("data", "broker-a", "index")
    assert P.checkpoint_path(S) == os.path.join("data", "broker-a", "checkpoint")
    assert P.abort_path(S) == os.path.join("data", "broker-a", "abort")
    assert P.lock_path(S) == os.path.join("data", "broker-a", "lock")
    assert P.config_dir(S) == os.path.join("data", "broker-a", "config")


def test_consume_queue_dir_of_the_root_a_topic_and_a_queue():
    """consumequeue/{topic}/{queueId}/, the queue id in decimal."""
    assert P.consume_queue_dir(S) == os.path.join("data", "broker-a", "consumequeue")
    assert P.consume_queue_dir(S, "TopicTest") == os.path.join("data", "broker-a", "consumequeue", "TopicTest")
    assert P.consume_queue_dir(S, "TopicTest", 12) == os.path.join("data", "broker-a", "consumequeue", "TopicTest",
                                                                   "12")
    assert P.consume_queue_dir(S, "T", 0).endswith(os.path.join("T", "0"))
