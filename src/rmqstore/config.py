"""``MessageStoreConfig``: RocketMQ's ``MessageStoreConfig`` defaults, validated once.

Field names are snake_case; :meth:`MessageStoreConfig.from_properties` accepts RocketMQ's camelCase
keys (``mappedFileSizeCommitLog``, ``checkCRCOnRecover`` ...) from a broker.conf-style properties
file or a mapping, with string or native values. Matching ignores case and underscores, so every
upstream spelling (``enabledAppendPropCRC``) maps onto its field. Unknown keys are ignored, as
upstream's ``MixAll.properties2Object`` does.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping

import javaproperties

from .errors import ConfigError
from .format.javalang import java_trim, parse_int

SYNC_FLUSH = "SYNC_FLUSH"
ASYNC_FLUSH = "ASYNC_FLUSH"
CQ_UNIT_SIZE = 20
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
#: the two presets (docs/configuration.md): RocketMQ's broker defaults, and a store that fits a laptop
BROKER = "broker"
EMBEDDED = "embedded"
#: the store roles (RocketMQ's ``BrokerRole``)
HA_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
#: the largest body a slave accepts in one HA frame (its 4 MiB read buffer less the 12-byte header)
HA_MAX_BATCH = 4 * 1024 * 1024 - 12
_TIME_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True)
class MessageStoreConfig:
    """Store settings with RocketMQ's defaults (FORMAT.md §1.4). Mirrors ``MessageStoreConfig``."""

    mapped_file_size_commit_log: int = 1073741824
    mapped_file_size_consume_queue: int = 6000000
    max_hash_slot_num: int = 5000000
    max_index_num: int = 20000000
    message_index_enable: bool = True
    message_index_safe: bool = False
    max_msgs_num_batch: int = 64
    default_query_max_num: int = 32
    max_message_size: int = 4194304
    flush_disk_type: str = ASYNC_FLUSH
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10000
    flush_interval_consume_queue: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60000
    sync_flush_timeout: int = 5000
    check_crc_on_recover: bool = True
    enabled_append_prop_crc: bool = False
    force_verify_prop_crc: bool = False
    auto_message_version_on_topic_len: bool = True
    file_reserved_time: int = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_warning_level_ratio: int = 90
    disk_space_clean_forcibly_ratio: int = 85
    clean_file_forcibly_enable: bool = True
    delete_file_batch_max: int = 10
    max_transfer_bytes_on_message_in_memory: int = 262144
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 65536
    max_transfer_count_on_message_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40
    max_filter_message_size: int = 16000
    travel_cq_file_num_when_get_message: int = 1
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    enable_consume_queue_ext: bool = False
    #: Address written as STOREHOST when a message leaves it unset ("ip:port", IPv6 "[addr]:port").
    store_host: str = "127.0.0.1:10911"
    #: Beyond upstream (retention): consumer groups whose unconsumed messages retention keeps
    #: unless the disk is past the warning level. Empty = upstream behaviour.
    retain_unconsumed_groups: tuple[str, ...] = field(default_factory=tuple)
    #: BrokerConfig's ``flushConsumerOffsetInterval``: ms between writes of consumerOffset.json
    flush_consumer_offset_interval: int = 5000
    #: Beyond upstream: which disk policy retention applies. ``"broker"`` is RocketMQ's (delete
    #: expired segments at ``deleteWhen``, delete unexpired ones past ``diskSpaceCleanForciblyRatio``,
    #: refuse puts past ``diskSpaceWarningLevelRatio``); ``"embedded"`` never deletes data because of
    #: disk usage and refuses puts only when the free bytes would not hold the next files.
    disk_policy: str = BROKER
    #: Beyond upstream: delete segments older than ``fileReservedTime`` at ``deleteWhen``. Off in the
    #: embedded preset unless a retention is given.
    time_based_retention: bool = True
    # --- replication (RocketMQ's classic HA; docs/ha-protocol.md) ----------------------------
    #: ASYNC_MASTER (default), SYNC_MASTER or SLAVE
    broker_role: str = "ASYNC_MASTER"
    ha_listen_port: int = 10912
    #: a slave's master HA address "host:port" (None: from the name server's registration reply)
    ha_master_address: str | None = None
    ha_send_heartbeat_interval: int = 5000
    ha_housekeeping_interval: int = 20000
    ha_transfer_batch_size: int = 32768
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024
    slave_timeout: int = 3000
    in_sync_replicas: int = 1
    total_replicas: int = 1
    #: Beyond upstream: ms a slave waits before connecting again (upstream: 5000, fixed)
    ha_reconnect_interval: int = 5000
    #: Beyond upstream: bytes before its end a slave compares with its master's when it connects, to
    #: find and cut a tail the master never had (rejoin of an old master); 0 turns the check off
    ha_rejoin_check_bytes: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        def positive(name: str) -> None:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)!r}")

        for name in ("mapped_file_size_commit_log", "mapped_file_size_consume_queue",
                     "max_hash_slot_num", "max_msgs_num_batch", "delete_file_batch_max"):
            positive(name)
        if self.max_index_num < 2:
            raise ConfigError(f"max_index_num must be >= 2 (item 0 is never used), got {self.max_index_num}")
        if self.mapped_file_size_commit_log < 64:
            raise ConfigError("mapped_file_size_commit_log must be at least 64 bytes")
        if self.flush_disk_type not in (SYNC_FLUSH, ASYNC_FLUSH):
            raise ConfigError(f"flush_disk_type must be SYNC_FLUSH or ASYNC_FLUSH, got {self.flush_disk_type!r}")
        if self.enable_consume_queue_ext:
            raise ConfigError("enable_consume_queue_ext=true is not supported (ConsumeQueueExt is off upstream by default)")
        if self.disk_policy not in (BROKER, EMBEDDED):
            raise ConfigError(f"disk_policy must be {BROKER!r} or {EMBEDDED!r}, got {self.disk_policy!r}")
        if self.broker_role not in HA_ROLES:
            raise ConfigError(f"broker_role must be one of {', '.join(HA_ROLES)}, got {self.broker_role!r}")
        if not 0 < self.ha_transfer_batch_size <= HA_MAX_BATCH:
            raise ConfigError(f"ha_transfer_batch_size must be in (0, {HA_MAX_BATCH}] (the slave reads at most "
                              f"4 MiB a frame), got {self.ha_transfer_batch_size}")
        if not isinstance(self.retain_unconsumed_groups, tuple):
            object.__setattr__(self, "retain_unconsumed_groups", tuple(self.retain_unconsumed_groups))
        self.delay_levels_ms  # validates

    # --- derived values ----------------------------------------------------------------------
    @property
    def cq_file_size(self) -> int:
        """Consume-queue segment size rounded up to a multiple of 20 (FORMAT.md §1.2)."""
        return -(-self.mapped_file_size_consume_queue // CQ_UNIT_SIZE) * CQ_UNIT_SIZE

    @property
    def index_file_size(self) -> int:
        return 40 + self.max_hash_slot_num * 4 + self.max_index_num * 20

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type == SYNC_FLUSH

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        out = []
        for tok in self.message_delay_level.split():
            unit = tok[-1]
            if unit not in _TIME_UNITS_MS or not tok[:-1].isdigit():
                raise ConfigError(f"message_delay_level: bad level {tok!r} (expected e.g. 1s, 5m, 2h)")
            out.append(int(tok[:-1]) * _TIME_UNITS_MS[unit])
        return tuple(out)

    def replace(self, **changes: Any) -> "MessageStoreConfig":
        return dataclasses.replace(self, **changes)

    @classmethod
    def embedded(cls, **overrides: Any) -> "MessageStoreConfig":
        """The preset a new store opened from Python without a config gets: small files (a store
        with one message allocates about 43 MB), no deletion because of disk usage, no time-based
        deletion unless ``file_reserved_time`` is given, puts refused only when the disk cannot
        hold the next files. Any field can be overridden."""
        values: dict[str, Any] = dict(EMBEDDED_DEFAULTS)
        values["time_based_retention"] = "file_reserved_time" in overrides
        values.update(overrides)
        return cls(**values)

    # --- loading -----------------------------------------------------------------------------
    @classmethod
    def from_properties(cls, source: str | os.PathLike | Mapping[str, Any], **overrides: Any) -> "MessageStoreConfig":
        """Build from a broker.conf path or a mapping.

        A file is read as RocketMQ's broker reads it (``java.util.Properties.load``: ISO-8859-1,
        ``=``/``:``/blank separators, escapes, continuation lines) and its values are judged as
        ``MixAll.properties2Object`` judges them: keys are RocketMQ's exact camelCase names (others
        are ignored, with a warning), ints must pass ``Integer.parseInt`` (the broker keeps its
        default for a value that does not, e.g. ``"1024 "`` with a trailing blank or ``"1_024"``:
        here that is a :class:`ConfigError` naming the key), booleans are ``true``/``false`` in any
        case (anything else the broker reads as false: a ``ConfigError`` here), strings are
        trimmed as Java's ``String.trim``. A mapping may use the camelCase or the snake_case names,
        with Python values or strings (judged the same way)."""
        mapping, from_file = read_source(source)
        by_camel, by_snake = java_fields(cls)
        kwargs: dict[str, Any] = {}
        for key, value in mapping.items():
            key = str(key)
            f = by_camel.get(key) or (None if from_file else by_snake.get(key))
            if f is None:
                if key == "brokerIP1":
                    kwargs.setdefault("_ip", java_trim(str(value)))
                elif key == "listenPort":
                    kwargs.setdefault("_port", str(value))
                elif from_file and key.replace("_", "").lower() in _NORMALIZED:
                    log.warning("%s: key %r is not RocketMQ's spelling %r: ignored, as the broker ignores it",
                                os.fspath(source), key, _NORMALIZED[key.replace("_", "").lower()])
                continue
            kwargs[f.name] = coerce_value(f, value)
        ip, port = kwargs.pop("_ip", None), kwargs.pop("_port", None)
        if ip is not None and "store_host" not in kwargs:
            if port is not None:
                try:
                    port = parse_int(port)
                except ValueError:
                    raise ConfigError(f"config key listenPort: {port!r} is not an int as Integer.parseInt "
                                      "reads one (the broker would ignore it)") from None
            kwargs["store_host"] = f"{ip}:{10911 if port is None else port}"
        kwargs.update(overrides)
        return cls(**kwargs)


log = logging.getLogger(__name__)


#: RocketMQ's spelling where it is not the plain camelCase of the field name
_JAVA_NAMES = {"check_crc_on_recover": "checkCRCOnRecover", "enabled_append_prop_crc": "enabledAppendPropCRC",
               "force_verify_prop_crc": "forceVerifyPropCRC"}


def camel_name(name: str) -> str:
    """The broker.conf key of a field (RocketMQ's setter name without ``set``, first letter lowered)."""
    if name in _JAVA_NAMES:
        return _JAVA_NAMES[name]
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


#: The embedded preset's values (``MessageStoreConfig.embedded``): 32 MiB commitlog segments,
#: consume-queue files of 50,000 units (1 MB), index files of 100,000 slots and 400,000 items
#: (8.4 MB, upstream's 1:4 ratio so that the geometry can be inferred from a file's size).
EMBEDDED_DEFAULTS: dict[str, Any] = {
    "mapped_file_size_commit_log": 32 * 1024 * 1024,
    "mapped_file_size_consume_queue": 50_000 * CQ_UNIT_SIZE,
    "max_hash_slot_num": 100_000,
    "max_index_num": 400_000,
    "disk_policy": EMBEDDED,
}


#: every field's name without underscores, lowercased -> RocketMQ's camelCase (for the warning on a
#: misspelt broker.conf key)
_NORMALIZED = {f.name.replace("_", "").lower(): camel_name(f.name) for f in fields(MessageStoreConfig)}


def read_source(source: str | os.PathLike | Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """``(key -> value, read from a file)`` of a broker.conf path (read as Java reads it) or a mapping."""
    if isinstance(source, (str, os.PathLike)):
        return read_properties_file(os.fspath(source)), True
    if isinstance(source, Mapping):
        return dict(source), False
    raise ConfigError(f"from_properties takes a path or a mapping, got {type(source).__name__}")


def java_fields(cls, java_name: Callable[[str], str] = camel_name) -> tuple[dict, dict]:
    """A config dataclass's fields by their broker.conf key and by their Python name."""
    return {java_name(f.name): f for f in fields(cls)}, {f.name: f for f in fields(cls)}


def read_properties_file(path: str) -> dict[str, str]:
    """A Java ``.properties`` file as ``Properties.load(InputStream)`` reads it (the well-kept
    ``javaproperties`` package: ISO-8859-1, escapes, continuations; later keys win)."""
    try:
        with open(path, "rb") as fh:
            return dict(javaproperties.load(fh))
    except OSError as e:
        raise ConfigError(f"cannot read config file: {e.strerror}", path=path) from e
    except (ValueError, UnicodeError) as e:
        raise ConfigError(f"not a Java properties file: {e}", path=path) from e


def coerce_value(f: dataclasses.Field, value: Any) -> Any:
    """A value as ``MixAll.properties2Object`` takes it for the Java type of field ``f``."""
    typ = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    key = camel_name(f.name)
    if typ == "bool":
        if isinstance(value, bool):
            return value
        s = str(value)
        if s.lower() in ("true", "false"):
            return s.lower() == "true"
        raise ConfigError(f"config key {key}: {value!r} is not true or false (Boolean.parseBoolean would read it "
                          "as false)")
    if typ == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            if not -(1 << 31) <= value < (1 << 31):
                raise ConfigError(f"config key {key}: {value} is outside a Java int")
            return value
        try:
            return parse_int(str(value))
        except ValueError:
            raise ConfigError(f"config key {key}: {value!r} is not an int as Integer.parseInt reads one (RocketMQ's "
                              "broker would ignore it and keep its default)") from None
    if typ.startswith("tuple"):
        if isinstance(value, str):
            return tuple(java_trim(v) for v in value.split(",") if java_trim(v))
        return tuple(value)
    return java_trim(str(value))
