"""rmqstore: Apache RocketMQ's message store in Python, byte-compatible with its on-disk format.

``import rmqstore`` never imports pyspark, click or rich. Where pyspark is installed it names this
interpreter as the Python of Spark's data-source workers (``PYSPARK_DRIVER_PYTHON``, unless
``PYSPARK_PYTHON`` or ``PYSPARK_DRIVER_PYTHON`` is set), so that ``spark.read.format("rocketmq")``
works in any SparkSession built after ``import rmqstore``; without it Spark would run ``python3``
from ``PATH``, which may not have rmqstore (see :func:`rmqstore.spark_python.spark_python_default`).
"""
from .spark_python import spark_python_default
from .config import MessageStoreConfig
from .errors import (ConfigError, CorruptRecordError, MessageIdError, OffsetError, ReadOnlyStoreError, RmqStoreError,
                     StoreClosedError, StoreIOError, StoreLockedError, StoreNotFoundError)
from .message_store import MessageStore
from .types import (GetMessageResult, GetMessageStatus, Message, MessageRecord, PutMessageResult,
                    PutMessageStatus, QueryMessageResult, SkippedMessage)

__version__ = "0.1.0"

spark_python_default()

__all__ = [
    "MessageStore", "MessageStoreConfig", "Message", "MessageRecord", "PutMessageResult", "PutMessageStatus",
    "GetMessageResult", "GetMessageStatus", "QueryMessageResult", "RmqStoreError", "ConfigError",
    "CorruptRecordError", "OffsetError", "ReadOnlyStoreError", "StoreClosedError", "StoreIOError",
    "StoreLockedError", "StoreNotFoundError", "MessageIdError", "SkippedMessage",
]
