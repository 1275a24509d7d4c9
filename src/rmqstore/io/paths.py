"""Every file and directory name of a store, once (RocketMQ's names, and ours under ``config/``).

::

    <store>/commitlog/<20-digit start offset>          segments of the commit log
    <store>/consumequeue/<topic>/<queueId>/<offset>    consume-queue segments
    <store>/index/<creation time yyyyMMddHHmmssSSS>    index files
    <store>/checkpoint   <store>/abort   <store>/lock
    <store>/config/consumerOffset.json  topics.json  subscriptionGroup.json  delayOffset.json
                   timerState.json  rmqstore-queues.json  rmqstore-index.json
"""
from __future__ import annotations

import os

COMMITLOG = "commitlog"
CONSUMEQUEUE = "consumequeue"
INDEX = "index"
CHECKPOINT = "checkpoint"
ABORT = "abort"
LOCK = "lock"
CONFIG = "config"
BROKER_CONF = "broker.conf"

#: under CONFIG: RocketMQ's broker state files
CONSUMER_OFFSET_FILE = os.path.join(CONFIG, "consumerOffset.json")
TOPICS_FILE = os.path.join(CONFIG, "topics.json")
SUBSCRIPTION_GROUP_FILE = os.path.join(CONFIG, "subscriptionGroup.json")
DELAY_OFFSET_FILE = os.path.join(CONFIG, "delayOffset.json")
TIMER_STATE_FILE = os.path.join(CONFIG, "timerState.json")
#: under CONFIG: rmqstore's own (queue extents and index statistics kept across restarts)
QUEUE_EXTENTS_FILE = os.path.join(CONFIG, "rmqstore-queues.json")
INDEX_STATS_FILE = os.path.join(CONFIG, "rmqstore-index.json")


def commitlog_dir(store_dir: str) -> str:
    return os.path.join(store_dir, COMMITLOG)


def consume_queue_dir(store_dir: str, topic: str | None = None, queue_id: int | None = None) -> str:
    """``consumequeue/``, or a topic's directory, or one queue's."""
    parts = [store_dir, CONSUMEQUEUE] + ([topic] if topic is not None else []) + \
        ([str(queue_id)] if queue_id is not None else [])
    return os.path.join(*parts)


def index_dir(store_dir: str) -> str:
    return os.path.join(store_dir, INDEX)


def checkpoint_path(store_dir: str) -> str:
    return os.path.join(store_dir, CHECKPOINT)


def abort_path(store_dir: str) -> str:
    return os.path.join(store_dir, ABORT)


def lock_path(store_dir: str) -> str:
    return os.path.join(store_dir, LOCK)


def config_dir(store_dir: str) -> str:
    return os.path.join(store_dir, CONFIG)
