"""``BrokerConfig``: the broker's own settings from broker.conf, with RocketMQ's names and defaults.

The store's settings in the same file (``flushDiskType``, ``maxMessageSize``, ``messageDelayLevel``,
...) go to :class:`~rmqstore.config.MessageStoreConfig`; both read the file as RocketMQ's broker does
(``MixAll.properties2Object``: exact camelCase keys, ``Integer.parseInt``/``Boolean.parseBoolean``
values, unknown keys ignored).
"""
from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass
from typing import Any, Mapping

from ..config import camel_name, coerce_value, java_fields, read_source
from ..errors import ConfigError


def _host_name() -> str:
    try:
        return socket.gethostname() or "DEFAULT_BROKER"
    except OSError:
        return "DEFAULT_BROKER"


@dataclass(frozen=True)
class BrokerConfig:
    """Mirrors the part of ``org.apache.rocketmq.common.BrokerConfig`` this broker implements."""

    #: upstream's default is the host name
    broker_name: str = dataclasses.field(default_factory=_host_name)
    broker_cluster_name: str = "DefaultCluster"
    broker_id: int = 0
    #: the address advertised in routes; empty = the listen address
    broker_ip1: str = ""
    #: the port advertised in routes; 0 = the port actually listened on
    listen_port: int = 0
    # --- clusters: name servers, broker groups, slaves ---
    #: name servers to register with, ``a:9876;b:9876`` (``namesrvAddr``); empty = this process is
    #: its own name server (the one-process broker of ``rmqstore serve``)
    namesrv_addr: str = ""
    #: the address slaves replicate from (``brokerIP2``:haListenPort); empty = brokerIP1's host
    broker_ip2: str = ""
    #: a slave serves pulls (``slaveReadEnable``), and a master then sends lagging consumers to it
    slave_read_enable: bool = False
    #: beyond upstream (rmqstore's own key): a slave also serves pulls once its master has been
    #: unreachable for ``haHousekeepingInterval``; false = RocketMQ 5's answer (SYSTEM_BUSY)
    slave_read_when_master_gone: bool = True
    #: ms between registrations with the name servers (``registerNameServerPeriod``; kept within 10-60 s)
    register_name_server_period: int = 30000
    #: R|W bits ANDed into every registered topic's permission (``brokerPermission``; 6 = read-write)
    broker_permission: int = 6
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    reject_transaction_message: bool = False
    #: ms a half message stays unchecked before the producer is asked (``transactionTimeOut``)
    transaction_time_out: int = 6000
    #: checks of one half message before it is dropped (``transactionCheckMax``)
    transaction_check_max: int = 15
    #: ms between transaction check rounds (``transactionCheckInterval``)
    transaction_check_interval: int = 30000
    #: topics may be created with ``message.type`` MIXED (``enableMixedMessageType``)
    enable_mixed_message_type: bool = False
    #: ms a client lives without a heartbeat (``channelExpiredTimeout``)
    channel_expired_timeout: int = 120000
    # --- the gRPC endpoint: RocketMQ's ProxyConfig names and defaults ---
    #: the shortest invisible time a receive may ask for (``minInvisibleTimeMillsForRecv``)
    min_invisible_time_mills_for_recv: int = 10000
    #: the bounds of a receive's long polling (``grpcClientConsumerMin/MaxLongPollingTimeoutMillis``)
    grpc_client_consumer_min_long_polling_timeout_millis: int = 5000
    grpc_client_consumer_max_long_polling_timeout_millis: int = 20000
    #: a send's message type checked against its topic's ``message.type`` (NORMAL without one), and
    #: clients told to check it too (``enableTopicMessageTypeCheck``); false accepts any type anywhere
    enable_topic_message_type_check: bool = True

    def __post_init__(self) -> None:
        if not self.broker_name:
            raise ConfigError("brokerName must not be empty")
        if self.default_topic_queue_nums <= 0:
            raise ConfigError(f"defaultTopicQueueNums must be > 0, got {self.default_topic_queue_nums}")
        if self.broker_id < 0:
            raise ConfigError(f"brokerId must be >= 0, got {self.broker_id}")
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort must be 0-65535, got {self.listen_port}")

    def replace(self, **changes: Any) -> "BrokerConfig":
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_properties(cls, source: str | os.PathLike | Mapping[str, Any], **overrides: Any) -> "BrokerConfig":
        """From a broker.conf path or a mapping (camelCase keys; a mapping may also use snake_case)."""
        mapping, from_file = read_source(source)
        by_camel, by_snake = java_fields(cls, java_key)
        kwargs: dict[str, Any] = {}
        for key, value in mapping.items():
            f = by_camel.get(str(key)) or (None if from_file else by_snake.get(str(key)))
            if f is not None:
                kwargs[f.name] = coerce_value(f, value)
        kwargs.update(overrides)
        return cls(**kwargs)


def java_key(name: str) -> str:
    return {"broker_ip1": "brokerIP1", "broker_ip2": "brokerIP2",
            "transaction_time_out": "transactionTimeOut"}.get(name) or camel_name(name)
