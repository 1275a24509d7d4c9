"""rmqstore: Apache RocketMQ's message store in Python, byte-compatible with its on-disk format.

``import rmqstore`` never imports pyspark, click or rich.
"""
from .config import MessageStoreConfig
from .errors import (ConfigError, CorruptRecordError, MessageIdError, OffsetError, ReadOnlyStoreError, RmqStoreError,
                     StoreClosedError, StoreIOError, StoreLockedError, StoreNotFoundError)
from .message_store import MessageStore
from .types import (GetMessageResult, GetMessageStatus, Message, MessageRecord, PutMessageResult,
                    PutMessageStatus, QueryMessageResult, SkippedMessage)

__version__ = "0.1.0"

__all__ = [
    "MessageStore", "MessageStoreConfig", "Message", "MessageRecord", "PutMessageResult", "PutMessageStatus",
    "GetMessageResult", "GetMessageStatus", "QueryMessageResult", "RmqStoreError", "ConfigError",
    "CorruptRecordError", "OffsetError", "ReadOnlyStoreError", "StoreClosedError", "StoreIOError",
    "StoreLockedError", "StoreNotFoundError", "MessageIdError", "SkippedMessage",
]
