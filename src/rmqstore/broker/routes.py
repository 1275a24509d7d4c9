"""The name server's route table (``RouteInfoManager`` upstream): broker groups, their members by
broker id, the queues of each topic per group, and the live registrations that expire.

One table serves both name servers: the standalone one (``rmqstore namesrv``) where brokers register
over the wire, and the one embedded in ``rmqstore serve``, where the broker registers itself in
process (and other brokers may register over the wire too). The rules are upstream's:

- ``brokerAddrs`` is keyed brokerName -> brokerId -> address; an address registering under another id
  replaces its old entry (a slave promoted to master comes back as id 0);
- topic queues count only from id 0 (or, when the broker says ``enableActingMaster``, from the lowest
  live id, a slave standing in for its master);
- a broker's first registration carrying exactly one topic is refused (upstream registers a single
  topic only after the broker's full registration);
- a registration lives ``heartbeatTimeoutMillis`` (120 s unless the broker says), and the table is
  scanned for expired ones; a closed channel unregisters its broker at once.

The table is used from one event loop (no locks). Bodies are encoded as fastjson writes them:
:func:`encode_fastjson` (field names sorted, integer map keys quoted or not).
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
import zlib
from dataclasses import dataclass, field

from ..engine.consumer_offsets import parse_broker_json
from ..errors import RmqStoreError
from .metadata import PERM_WRITE

log = logging.getLogger("rmqstore.namesrv")

MASTER_ID = 0
#: ``DEFAULT_BROKER_CHANNEL_EXPIRED_TIME``
DEFAULT_EXPIRE_MS = 120_000


class RegisterBodyError(RmqStoreError, ValueError):
    """A REGISTER_BROKER body that is not a ``RegisterBrokerBody``."""


# --- fastjson-shaped JSON -----------------------------------------------------------------------
def encode_fastjson(obj, *, quote_int_keys: bool = True, ascii_only: bool = False) -> bytes:
    """JSON as fastjson writes a bean: keys sorted, compact, ``None`` fields dropped; integer map
    keys bare (``{0:"a"}``) unless ``quote_int_keys`` (``QuoteFieldNames`` + ``MapSortField``, what
    route replies to clients >= V4_9_4 use); ``ascii_only`` escapes non-ASCII (``BrowserCompatible``)."""
    out: list[str] = []
    _emit(obj, out, quote_int_keys, ascii_only)
    return "".join(out).encode()


def _emit(obj, out: list[str], quote: bool, ascii_only: bool) -> None:
    if isinstance(obj, dict):
        ints = all(isinstance(k, int) for k in obj)
        items = sorted(((k, v) for k, v in obj.items() if v is not None), key=lambda kv: kv[0] if ints else str(kv[0]))
        out.append("{")
        for i, (k, v) in enumerate(items):
            if i:
                out.append(",")
            if isinstance(k, int) and not isinstance(k, bool) and not quote:
                out.append(str(k))
            else:
                out.append(json.dumps(str(k), ensure_ascii=ascii_only))
            out.append(":")
            _emit(v, out, quote, ascii_only)
        out.append("}")
    elif isinstance(obj, (list, tuple, set, frozenset)):
        seq = sorted(obj) if isinstance(obj, (set, frozenset)) else obj
        out.append("[")
        for i, v in enumerate(seq):
            if i:
                out.append(",")
            _emit(v, out, quote, ascii_only)
        out.append("]")
    else:
        out.append(json.dumps(obj, ensure_ascii=ascii_only))


def data_version_key(dv) -> tuple:
    """``DataVersion.equals``: counter, timestamp and stateVersion."""
    if not isinstance(dv, dict):
        return (None, None, None)
    return (dv.get("counter"), dv.get("timestamp"), dv.get("stateVersion", 0))


# --- REGISTER_BROKER bodies -----------------------------------------------------------------------
def decode_register_body(body: bytes, compressed: bool) -> tuple[dict, dict, list]:
    """``RegisterBrokerBody.decode``: (topicConfigTable, dataVersion, filterServerList). An empty body
    is an empty table with data version 0."""
    if not body:
        return {}, {"counter": 0, "timestamp": 0, "stateVersion": 0}, []
    if compressed:
        return _decode_compressed(body)
    try:
        doc = parse_broker_json(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise RegisterBodyError(f"RegisterBrokerBody is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise RegisterBodyError("RegisterBrokerBody is not a JSON object")
    # brokers before V3_0_11 send the TopicConfigSerializeWrapper itself
    wrapper = doc.get("topicConfigSerializeWrapper") or (doc if "topicConfigTable" in doc else {})
    table = wrapper.get("topicConfigTable") or {} if isinstance(wrapper, dict) else {}
    if not isinstance(table, dict):
        raise RegisterBodyError("topicConfigTable is not an object")
    dv = wrapper.get("dataVersion") or {} if isinstance(wrapper, dict) else {}
    filters = doc.get("filterServerList") or []
    return _checked_topics(table), _checked_version(dv), list(filters) if isinstance(filters, list) else []


_TOPIC_INTS = ("perm", "readQueueNums", "writeQueueNums", "topicSysFlag")
#: the largest inflated compressed body accepted (a deflate bomb must not exhaust memory)
MAX_INFLATED = 64 * 1024 * 1024


def _checked_topics(table: dict) -> dict:
    out = {}
    for name, tc in table.items():
        if not isinstance(tc, dict):
            continue
        bad = [k for k in _TOPIC_INTS if k in tc and (isinstance(tc[k], bool) or not isinstance(tc[k], int))]
        if bad:
            raise RegisterBodyError(f"topic config {name!r}: {', '.join(bad)} not integers")
        out[str(name)] = tc
    return out


def _checked_version(dv) -> dict:
    if not isinstance(dv, dict):
        return {}
    return {k: v for k, v in dv.items() if isinstance(v, int) and not isinstance(v, bool)}


def _decode_compressed(body: bytes) -> tuple[dict, dict, list]:
    """The deflated layout: i32 length + DataVersion JSON, i32 count, per topic i32 length + TopicConfig
    JSON, i32 length + filter server list JSON (then the queue mappings, unused here)."""
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(body, MAX_INFLATED)
        if inflater.unconsumed_tail:
            raise RegisterBodyError(f"compressed RegisterBrokerBody inflates past {MAX_INFLATED} bytes")
    except zlib.error as e:
        raise RegisterBodyError(f"compressed RegisterBrokerBody does not inflate: {e}") from None
    pos = 0

    def chunk() -> bytes:
        nonlocal pos
        if pos + 4 > len(raw):
            raise RegisterBodyError(f"compressed RegisterBrokerBody ends at byte {pos}, expected a length")
        n = int.from_bytes(raw[pos:pos + 4], "big", signed=True)
        if n < 0 or pos + 4 + n > len(raw):
            raise RegisterBodyError(f"compressed RegisterBrokerBody: length {n} at byte {pos} runs past the end")
        pos += 4 + n
        return raw[pos - n:pos]

    def count() -> int:
        nonlocal pos
        if pos + 4 > len(raw):
            raise RegisterBodyError(f"compressed RegisterBrokerBody ends at byte {pos}, expected a count")
        n = int.from_bytes(raw[pos:pos + 4], "big", signed=True)
        pos += 4
        return n

    try:
        dv = json.loads(chunk())
        table = {}
        for _ in range(count()):
            tc = json.loads(chunk())
            if isinstance(tc, dict):
                table[str(tc.get("topicName"))] = tc
        filters = json.loads(chunk())
    except ValueError as e:
        raise RegisterBodyError(f"compressed RegisterBrokerBody holds bad JSON: {e}") from None
    return _checked_topics(table), _checked_version(dv), list(filters) if isinstance(filters, list) else []


# --- the table ------------------------------------------------------------------------------------
@dataclass
class Live:
    """``BrokerLiveInfo``: when a registration was last renewed and how long it lives."""

    last_update: float
    timeout_ms: int
    data_version: dict
    channel: object | None
    ha_addr: str | None


@dataclass
class RegisterResult:
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass
class Registration:
    """One REGISTER_BROKER request."""

    cluster: str
    addr: str
    name: str
    broker_id: int
    ha_addr: str | None = None
    topics: dict = field(default_factory=dict)
    data_version: dict = field(default_factory=dict)
    timeout_ms: int | None = None
    acting_master: bool | None = None
    channel: object | None = None
    zone: str | None = None


class RouteTable:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.topic_queues: dict[str, dict[str, dict]] = {}
        self.brokers: dict[str, dict] = {}
        self.clusters: dict[str, set[str]] = {}
        self.live: dict[tuple[str, str], Live] = {}

    # --- registration ---------------------------------------------------------------------------
    def register(self, r: Registration) -> RegisterResult | None:
        """``registerBroker``: the master's addresses for a slave; None when refused (a first
        registration with exactly one topic)."""
        self.clusters.setdefault(r.cluster, set()).add(r.name)
        bd = self.brokers.get(r.name)
        first = bd is None
        if bd is None:
            bd = self.brokers[r.name] = {"cluster": r.cluster, "brokerName": r.name, "brokerAddrs": {},
                                         "enableActingMaster": False}
        bd["enableActingMaster"] = bool(r.acting_master)
        bd["zoneName"] = r.zone
        addrs: dict[int, str] = bd["brokerAddrs"]
        for bid in [k for k, v in addrs.items() if v == r.addr and k != r.broker_id]:
            del addrs[bid]  # the same address under another id: a promoted slave, a demoted master
        old = addrs.get(r.broker_id)
        if old is not None and old != r.addr:
            prev = self.live.get((r.cluster, old))
            if prev is not None and prev.data_version.get("stateVersion", 0) > r.data_version.get("stateVersion", 0):
                log.warning("broker %s id %d: %s conflicts with the live %s (newer state): ignored", r.name,
                            r.broker_id, r.addr, old)
                self.live.pop((r.cluster, r.addr), None)
                return RegisterResult()
        if r.broker_id not in addrs and len(r.topics) == 1:
            log.warning("broker %s id %d (%s) registers one topic before its first full registration: refused",
                        r.name, r.broker_id, r.addr)
            return None
        first = first or not addrs.get(r.broker_id)
        addrs[r.broker_id] = r.addr
        prime_slave = r.acting_master is not None and r.broker_id != MASTER_ID and r.broker_id == min(addrs)
        if r.broker_id == MASTER_ID or prime_slave:
            changed = self.version_changed(r.cluster, r.addr, r.data_version)
            for tc in r.topics.values():
                if first or changed or r.name not in self.topic_queues.get(str(tc.get("topicName")), {}):
                    perm = int(tc.get("perm", 6))
                    if prime_slave and r.acting_master:
                        perm &= ~PERM_WRITE
                    self._put_queue(r.name, tc, perm)
        key = (r.cluster, r.addr)
        if key not in self.live and r.channel is not None:  # (not the embedded name server's own broker)
            log.info("new broker registered: %s %s id %d (HA %s)", r.cluster, r.addr, r.broker_id, r.ha_addr)
        self.live[key] = Live(self.clock(), r.timeout_ms or DEFAULT_EXPIRE_MS, dict(r.data_version), r.channel,
                              r.ha_addr)
        result = RegisterResult()
        if r.broker_id != MASTER_ID:
            master = addrs.get(MASTER_ID)
            live = self.live.get((r.cluster, master)) if master else None
            if live is not None:
                result.ha_server_addr, result.master_addr = live.ha_addr, master
        return result

    def version_changed(self, cluster: str, addr: str, dv: dict) -> bool:
        prev = self.live.get((cluster, addr))
        return prev is None or data_version_key(prev.data_version) != data_version_key(dv)

    def _put_queue(self, name: str, tc: dict, perm: int) -> None:
        qd = {"brokerName": name, "perm": perm, "readQueueNums": int(tc.get("readQueueNums", 0)),
              "topicSysFlag": int(tc.get("topicSysFlag", 0)), "writeQueueNums": int(tc.get("writeQueueNums", 0))}
        self.topic_queues.setdefault(str(tc.get("topicName")), {})[name] = qd

    def renew(self, cluster: str, addr: str) -> None:
        """BROKER_HEARTBEAT / QUERY_DATA_VERSION: the registration lives on."""
        live = self.live.get((cluster, addr))
        if live is not None:
            live.last_update = self.clock()

    def unregister(self, cluster: str, addr: str, name: str, broker_id: int | None = None) -> None:
        """``unRegisterBroker``: the address leaves its group; a group left empty leaves its cluster
        and every topic's queues."""
        self.live.pop((cluster, addr), None)
        bd = self.brokers.get(name)
        removed = False
        if bd is not None:
            addrs = bd["brokerAddrs"]
            for bid in [k for k, v in addrs.items() if v == addr]:
                del addrs[bid]
            if not addrs:
                del self.brokers[name]
                removed = True
                names = self.clusters.get(cluster)
                if names is not None:
                    names.discard(name)
                    if not names:
                        del self.clusters[cluster]
        log.info("broker unregistered: %s %s (%s)%s", cluster, addr, name, ", group gone" if removed else "")
        for topic in list(self.topic_queues):
            qmap = self.topic_queues[topic]
            if removed:
                qmap.pop(name, None)
            if not qmap:
                del self.topic_queues[topic]
            elif not removed and name in qmap and bd is not None and bd["enableActingMaster"] \
                    and (not bd["brokerAddrs"] or min(bd["brokerAddrs"]) > 0):
                qmap[name]["perm"] &= ~PERM_WRITE

    async def expire_every(self, interval_s: float) -> None:
        """:meth:`expire` every ``interval_s`` seconds until cancelled (a failed scan is logged; the
        next one retries): the standalone name server's loop and a broker's embedded one."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.expire()
            except Exception:  # noqa: BLE001 - the next scan retries
                log.exception("expiry scan failed")

    def expire(self) -> list[tuple[str, str]]:
        """``scanNotActiveBroker``: unregister what was not renewed in time; the expired (cluster,
        address) pairs (their channels are closed)."""
        now = self.clock()
        gone = [(k, v) for k, v in self.live.items() if v.last_update + v.timeout_ms / 1000 < now]
        for (cluster, addr), live in gone:
            log.warning("broker channel expired: %s %s (%d ms)", cluster, addr, live.timeout_ms)
            close = getattr(getattr(live.channel, "transport", None), "close", None)
            if close is not None:
                close()
            self._unregister_addr(cluster, addr)
        return [k for k, _ in gone]

    def on_channel_closed(self, channel) -> None:
        """A broker's connection closed: unregister it at once (``BrokerHousekeepingService``)."""
        for (cluster, addr), live in list(self.live.items()):
            if live.channel is channel:
                self._unregister_addr(cluster, addr)

    def _unregister_addr(self, cluster: str, addr: str) -> None:
        for bd in list(self.brokers.values()):
            if bd["cluster"] == cluster and addr in bd["brokerAddrs"].values():
                self.unregister(cluster, addr, bd["brokerName"])
                return
        self.live.pop((cluster, addr), None)

    # --- queries ----------------------------------------------------------------------------------
    def route(self, topic: str) -> dict | None:
        """``pickupTopicRouteData``: None when no queue or no group is known for the topic."""
        qmap = self.topic_queues.get(topic)
        if not qmap:
            return None
        datas = [dict(self.brokers[n], brokerAddrs=dict(self.brokers[n]["brokerAddrs"]))
                 for n in sorted(qmap) if n in self.brokers]
        if not datas:
            return None
        return {"brokerDatas": datas, "filterServerTable": {}, "queueDatas": [dict(qmap[n]) for n in sorted(qmap)]}

    def cluster_info(self) -> dict:
        return {"brokerAddrTable": self.brokers, "clusterAddrTable": self.clusters}

    def all_topics(self) -> list[str]:
        return sorted(self.topic_queues)

    def topics_of_cluster(self, cluster: str) -> list[str]:
        names = self.clusters.get(cluster) or set()
        return sorted(t for t, qmap in self.topic_queues.items() if names & qmap.keys())

    def system_topics(self) -> tuple[list[str], str | None]:
        """Cluster and broker names (the topics each broker creates for itself), and one master
        address to ask for more."""
        topics: list[str] = []
        addr = None
        for cluster, names in sorted(self.clusters.items()):
            topics.append(cluster)
            topics.extend(sorted(names))
        for bd in self.brokers.values():
            if bd["brokerAddrs"]:
                addr = bd["brokerAddrs"].get(MASTER_ID) or next(iter(bd["brokerAddrs"].values()))
        return topics, addr

    def member_group(self, cluster: str, name: str) -> dict:
        bd = self.brokers.get(name)
        return {"brokerAddrs": dict(bd["brokerAddrs"]) if bd else {}, "brokerName": name, "cluster": cluster}

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        if not cluster:
            self.topic_queues.pop(topic, None)
            return
        qmap = self.topic_queues.get(topic)
        if qmap is None:
            return
        for name in self.clusters.get(cluster) or ():
            qmap.pop(name, None)
        if not qmap:
            del self.topic_queues[topic]

    def register_topic(self, topic: str, queue_datas: list[dict]) -> None:
        """REGISTER_TOPIC_IN_NAMESRV: queue data for groups the table knows (else nothing)."""
        if any(str(q.get("brokerName")) not in self.brokers for q in queue_datas):
            log.warning("register topic %s names an unknown broker group: ignored", topic)
            return
        qmap = self.topic_queues.setdefault(topic, {})
        for q in queue_datas:
            qmap[str(q["brokerName"])] = dict(q)

    def write_perm(self, name: str, add: bool) -> int:
        """WIPE/ADD_WRITE_PERM_OF_BROKER: how many topics changed."""
        n = 0
        for qmap in self.topic_queues.values():
            qd = qmap.get(name)
            if qd is not None:
                qd["perm"] = 6 if add else (qd["perm"] & ~PERM_WRITE)
                n += 1
        return n
