"""``/metrics``: the broker's metrics in the Prometheus text format, named as RocketMQ 5's broker
writes them with ``metricsExporterType=PROM``.

The Java broker records through OpenTelemetry, whose Prometheus exporter appends the unit to a name
that does not already hold it and ``_total`` to a counter (``rocketmq_storage_size`` with unit
``bytes`` is ``rocketmq_storage_size_bytes``; ``rocketmq_storage_flush_behind_bytes`` stays;
``rocketmq_consumer_lag_latency`` in ``milliseconds`` is ``rocketmq_consumer_lag_latency_milliseconds``).
Every sample carries the broker's constant labels ``cluster``, ``node_type="broker"`` and
``node_id`` (the broker name), as the Java broker's ``newAttributesBuilder`` adds them, and
``otel_scope_name="broker-meter"``, as the exporter (OpenTelemetry Java 1.29, RocketMQ's) adds the
meter's name to each. (That exporter's ``# TYPE`` lines name a counter ``..._total_total`` and leave
the unit out; ours name the samples' family, which Prometheus does not look at for queries.)

Everything is read at scrape time: the counters from :class:`~rmqstore.broker.traffic.Traffic`
(updated once per put or pull result), lag from the consumer offsets and the queues' max offsets.
"""
from __future__ import annotations

import shutil
import time

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import CollectorRegistry

from ..traffic import SIZE_BUCKETS, is_retry_or_dlq, is_system_group, is_system_topic
from .views import dispatch_behind, group_lag_rows

CONST = ("cluster", "node_type", "node_id", "otel_scope_name")
IN_LABELS = CONST + ("topic", "message_type", "is_system")
OUT_LABELS = CONST + ("topic", "consumer_group", "is_system")
LAG_LABELS = CONST + ("topic", "consumer_group", "is_retry", "is_system")


#: ``ConsumeType.getTypeCN()`` lower-cased, the Java broker's ``consume_mode`` label
_CONSUME_MODES = {"CONSUME_PASSIVELY": "push", "CONSUME_ACTIVELY": "pull", "CONSUME_POP": "pop"}


def _bool(v: bool) -> str:
    return "true" if v else "false"


def version_desc(ordinal: int) -> str:
    """``MQVersion.getVersionDesc`` lower-cased (``v5_3_0``) for a client's version ordinal; the
    versions before 3.9.1 (irregular names) as ``v_<ordinal>``."""
    k = ordinal - 194  # V3_9_1_SNAPSHOT; from there every patch is a SNAPSHOT then a release
    if k < 0:
        return f"v_{ordinal}"
    n = 391 + k // 2
    name = f"v{n // 100}_{n // 10 % 10}_{n % 10}"
    return name + "_snapshot" if k % 2 == 0 else name


class BrokerCollector:
    """A ``prometheus_client`` collector over a running broker."""

    def __init__(self, broker) -> None:
        self.broker = broker
        cfg = broker.cfg
        self.const = (cfg.broker_cluster_name, "broker", cfg.broker_name, "broker-meter")

    def collect(self):
        yield from self._traffic()
        yield from self._lag()
        yield from self._clients()
        yield from self._store()
        yield from self._replication()

    def _traffic(self):
        t, c = self.broker.traffic, self.const
        m_in = CounterMetricFamily("rocketmq_messages_in", "Total number of incoming messages", labels=IN_LABELS)
        b_in = CounterMetricFamily("rocketmq_throughput_in", "Total traffic of incoming messages", labels=IN_LABELS)
        size = HistogramMetricFamily("rocketmq_message_size", "Incoming messages size", labels=IN_LABELS)
        for (topic, mtype), row in list(t.inbound.items()):
            if is_retry_or_dlq(topic):
                continue  # as the Java broker: retry and DLQ topics are not counted in
            labels = c + (topic, mtype, _bool(is_system_topic(topic)))
            m_in.add_metric(labels, row[0])
            b_in.add_metric(labels, row[1])
            acc, buckets = 0, []
            for bound, n in zip(SIZE_BUCKETS + (float("inf"),), row[2:-2]):
                acc += n
                buckets.append(("+Inf" if bound == float("inf") else str(bound), acc))
            size.add_metric(labels, buckets, row[-2])
        m_out = CounterMetricFamily("rocketmq_messages_out", "Total number of outgoing messages", labels=OUT_LABELS)
        b_out = CounterMetricFamily("rocketmq_throughput_out", "Total traffic of outgoing messages", labels=OUT_LABELS)
        for (topic, group), (n, nbytes) in list(t.outbound.items()):
            if is_retry_or_dlq(topic):
                continue
            labels = c + (topic, group, _bool(is_system_topic(topic) or is_system_group(group)))
            m_out.add_metric(labels, n)
            b_out.add_metric(labels, nbytes)
        dlq = CounterMetricFamily("rocketmq_send_to_dlq_messages", "Consumer send to DLQ messages",
                                  labels=CONST + ("consumer_group", "topic", "is_system"))
        for (group, topic), n in list(t.dlq.items()):
            dlq.add_metric(c + (group, topic, _bool(is_system_topic(topic) or is_system_group(group))), n)
        return [m_in, b_in, size, m_out, b_out, dlq]

    def _lag(self):
        c = self.const
        fams = {
            "lag": GaugeMetricFamily("rocketmq_consumer_lag_messages", "Consumer lag messages", labels=LAG_LABELS),
            "latency": GaugeMetricFamily("rocketmq_consumer_lag_latency", "Consumer lag time", labels=LAG_LABELS,
                                         unit="milliseconds"),
            "inflight": GaugeMetricFamily("rocketmq_consumer_inflight_messages", "Consumer inflight messages",
                                          labels=LAG_LABELS),
            "ready": GaugeMetricFamily("rocketmq_consumer_ready_messages", "Consumer ready messages",
                                       labels=LAG_LABELS),
        }
        now = int(time.time() * 1000)
        for row in group_lag_rows(self.broker):
            labels = c + (row["topic"], row["group"], _bool(row["topic"].startswith("%RETRY%")),
                          _bool(is_system_topic(row["topic"]) or is_system_group(row["group"])))
            fams["lag"].add_metric(labels, row["lag"])
            earliest = row["earliest_unconsumed_ms"]
            fams["latency"].add_metric(labels, now - earliest if earliest > 0 else 0)
            fams["inflight"].add_metric(labels, row["inflight"])
            fams["ready"].add_metric(labels, row["lag"] - row["inflight"])
        return list(fams.values())

    def _clients(self):
        b, c = self.broker, self.const
        topics = GaugeMetricFamily("rocketmq_topic_number", "Active topic number", labels=CONST)
        topics.add_metric(c, len(b.topics.table))
        groups = GaugeMetricFamily("rocketmq_consumer_group_number", "Active subscription group number", labels=CONST)
        groups.add_metric(c, len(b.groups.table))
        perm = GaugeMetricFamily("rocketmq_broker_permission", "Broker permission", labels=CONST)
        perm.add_metric(c, 4 if b.read_only else 6)
        prod = GaugeMetricFamily("rocketmq_producer_connections", "Producer connections",
                                 labels=CONST + ("language", "version", "protocol_type"))
        counts: dict[tuple, int] = {}
        for chans in list(b.clients.producers.values()):
            for conn in list(chans):
                key = (conn.language.lower(), version_desc(conn.version), "remoting")
                counts[key] = counts.get(key, 0) + 1
        for key, n in counts.items():
            prod.add_metric(c + key, n)
        cons = GaugeMetricFamily("rocketmq_consumer_connections", "Consumer connections",
                                 labels=CONST + ("consumer_group", "language", "version", "consume_mode",
                                                 "protocol_type", "is_system"))
        counts = {}
        for name, g in list(b.clients.consumers.items()):
            mode = _CONSUME_MODES.get(g.consume_type, "pull")
            for conn in list(g.channels):
                key = (name, conn.language.lower(), version_desc(conn.version), mode, "remoting",
                       _bool(is_system_group(name)))
                counts[key] = counts.get(key, 0) + 1
        for key, n in counts.items():
            cons.add_metric(c + key, n)
        return [topics, groups, perm, prod, cons]

    def _store(self):
        b, c = self.broker, self.const
        store = b.store
        cl = store.commit_log
        out = []

        def gauge(name, doc, value, unit=""):
            g = GaugeMetricFamily(name, doc, labels=CONST, unit=unit)
            g.add_metric(c, value)
            out.append(g)

        usage = shutil.disk_usage(store.path)
        gauge("rocketmq_storage_size", "Broker storage size", usage.total - usage.free, "bytes")
        gauge("rocketmq_storage_flush_behind_bytes", "Broker flush behind bytes",
              max(0, cl.confirm_offset - cl.flushed_offset))
        gauge("rocketmq_storage_dispatch_behind_bytes", "Broker dispatch behind bytes", dispatch_behind(store))
        earliest = store.get_earliest_message_time()
        if earliest > 0:
            gauge("rocketmq_storage_message_reserve_time", "Broker message reserve time",
                  int(time.time() * 1000) - earliest, "milliseconds")
        half = GaugeMetricFamily("rocketmq_half_messages", "Half messages of all topics", labels=CONST + ("topic",))
        half.add_metric(c + ("RMQ_SYS_TRANS_HALF_TOPIC",), half_messages(b))
        out.append(half)
        return out

    def _replication(self):
        """Per slave of this master (once the store has an HA service): how far its acknowledged
        offset is behind the commit log's end, and how long ago it last reported. Not RocketMQ
        metrics (the Java broker exports none per slave): named ``rmqstore_``."""
        ha = getattr(self.broker.store, "ha", None)
        if ha is None:
            return []
        behind = GaugeMetricFamily("rmqstore_replication_lag_bytes", "Bytes the slave has not acknowledged",
                                   labels=CONST + ("slave",))
        age = GaugeMetricFamily("rmqstore_replication_last_report_age", "Time since the slave last reported",
                                labels=CONST + ("slave",), unit="milliseconds")
        end = self.broker.store.max_phy_offset
        now = time.monotonic()
        for peer, ack, last in ha.slaves():  # last: time.monotonic() of the slave's last report
            behind.add_metric(self.const + (str(peer),), max(0, end - ack))
            age.add_metric(self.const + (str(peer),), max(0, int((now - last) * 1000)))
        return [behind, age]


def half_messages(broker) -> int:
    """Half messages past the transaction check's progress (upper bound: those resolved after the
    progress are counted until the check passes them)."""
    from ..metadata import TRANS_HALF_TOPIC
    store = broker.store
    progress = store.consumer_offsets.query_offset("CID_RMQ_SYS_TRANS", TRANS_HALF_TOPIC, 0) or 0
    return max(0, store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0) - progress)


def registry_for(broker) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(BrokerCollector(broker))
    return reg


__all__ = ["BrokerCollector", "registry_for", "version_desc", "dispatch_behind"]
