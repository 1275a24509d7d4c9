"""The name server's requests (``DefaultRequestProcessor`` and ``ClientRequestProcessor`` upstream)
over a :class:`~rmqstore.broker.routes.RouteTable`, and :class:`NameServer`, the standalone name
server of ``rmqstore namesrv``.

Answers as upstream's: REGISTER_BROKER 103 (bodyCrc32 checked, plain or compressed body; the reply
names a slave's master), UNREGISTER_BROKER 104, GET_ROUTEINFO_BY_TOPIC 105 (quoted ``brokerAddrs``
keys for clients >= V4_9_4 or ``acceptStandardJsonOnly``, bare ones for older clients),
GET_BROKER_CLUSTER_INFO 106 (bare keys), the topic lists mqadmin reads (206, 224, 304), topic
deletion and registration (216, 217), write permission (205, 327), the KV config (100, 101, 102,
219), BROKER_HEARTBEAT 904, QUERY_DATA_VERSION 322, GET_BROKER_MEMBER_GROUP 901, and the name server's
configuration (GET_NAMESRV_CONFIG 319, UPDATE_NAMESRV_CONFIG 318). The KV config (:class:`KVConfig`)
lives in memory, and in RocketMQ's ``kvConfig.json`` when given a path (``rmqstore namesrv --kv-config``;
upstream's default path, ``~/namesrv/kvConfig.json``, is never used unasked: a Java name server on the
same machine may own it).
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
import zlib

from ..engine.consumer_offsets import parse_broker_json
from ..errors import CorruptRecordError
from ..io.mapped_file import atomic_write_text
from .remoting import Header, RemotingCommand, ResponseCode, config_text, config_update
from .routes import MASTER_ID, RegisterBodyError, Registration, RouteTable, decode_register_body, encode_fastjson
from .server import RemotingServer, parse_listen

log = logging.getLogger("rmqstore.namesrv")

_V4_9_4 = 401
#: ``NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG``: sent back to registering brokers
ORDER_TOPIC_NAMESPACE = "ORDER_TOPIC_CONFIG"
#: seconds between expiry scans (``scanNotActiveBroker`` every 5 s upstream)
SCAN_INTERVAL_S = 5.0
#: ``DefaultRequestProcessor.configBlackList``'s defaults
NAMESRV_CONFIG_BLACK_LIST = frozenset({"configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome"})


class NamesrvCode:
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_TOPIC_IN_NAMESRV = 216
    REGISTER_TOPIC_IN_NAMESRV = 217
    GET_KVLIST_BY_NAMESPACE = 219
    GET_TOPICS_BY_CLUSTER = 224
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    QUERY_DATA_VERSION = 322
    ADD_WRITE_PERM_OF_BROKER = 327
    GET_BROKER_MEMBER_GROUP = 901
    BROKER_HEARTBEAT = 904


def body_crc32(body: bytes) -> int:
    """``UtilAll.crc32``: CRC-32 with the sign bit cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF


class KVConfig:
    """The name server's KV config (``KVConfigManager``): namespaces of string keys and values. With
    a ``path`` it is loaded from and written to RocketMQ's ``kvConfig.json`` (``{"configTable":
    {namespace: {key: value}}}``, compact, after every change; atomically, the previous file kept as
    ``.bak`` as upstream's ``string2File`` keeps it). As upstream, a namespace whose last key is
    deleted stays, empty: listing it answers an empty table, not QUERY_NOT_FOUND. A file that does
    not parse raises :class:`CorruptRecordError` (upstream would start empty and write over it)."""

    def __init__(self, path: str | None = None):
        self.path = path
        self.table: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        if path is not None:
            self.table = self._load(path)

    @staticmethod
    def _load(path: str) -> dict[str, dict[str, str]]:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except FileNotFoundError:
            return {}
        try:
            doc = parse_broker_json(text) if text.strip() else {}
            table = doc.get("configTable") or {}
            if not isinstance(table, dict) or not all(isinstance(t, dict) for t in table.values()):
                raise ValueError('"configTable" is not an object of objects')
        except (ValueError, AttributeError) as e:
            raise CorruptRecordError(f"cannot read the KV config: {e} (expected RocketMQ's kvConfig.json: "
                                     '{"configTable":{namespace:{key:value}}})', path=path) from None
        return {str(ns): {str(k): str(v) for k, v in t.items()} for ns, t in table.items()}

    def put(self, namespace: str, key: str, value: str) -> None:
        with self._lock:
            self.table.setdefault(namespace, {})[key] = value
            self._persist()

    def delete(self, namespace: str, key: str) -> None:
        with self._lock:
            self.table.get(namespace, {}).pop(key, None)
            self._persist()

    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def namespace(self, namespace: str) -> dict[str, str] | None:
        return self.table.get(namespace)

    def _persist(self) -> None:
        if self.path is not None:
            atomic_write_text(self.path, encode_fastjson({"configTable": self.table}).decode(), keep_bak=True)


class NameServerProcessor:
    """The name server's handlers. ``refresh`` (optional) runs before each route query: the embedded
    name server registers its own broker there."""

    def __init__(self, routes: RouteTable, *, refresh=None, config=None, kv: KVConfig | None = None):
        self.routes = routes
        self.refresh = refresh
        #: () -> the name server's settings under RocketMQ's keys (GET_NAMESRV_CONFIG)
        self.config = config or dict
        self.kv = kv if kv is not None else KVConfig()

    def handlers(self) -> dict:
        C = NamesrvCode
        return {C.REGISTER_BROKER: self.register, C.UNREGISTER_BROKER: self.unregister,
                C.GET_ROUTEINFO_BY_TOPIC: self.route, C.GET_BROKER_CLUSTER_INFO: self.cluster_info,
                C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.all_topics, C.GET_TOPICS_BY_CLUSTER: self.cluster_topics,
                C.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.system_topics, C.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
                C.REGISTER_TOPIC_IN_NAMESRV: self.register_topic, C.WIPE_WRITE_PERM_OF_BROKER: self.wipe_perm,
                C.ADD_WRITE_PERM_OF_BROKER: self.add_perm, C.PUT_KV_CONFIG: self.put_kv, C.GET_KV_CONFIG: self.get_kv,
                C.DELETE_KV_CONFIG: self.delete_kv, C.GET_KVLIST_BY_NAMESPACE: self.kv_list,
                C.BROKER_HEARTBEAT: self.heartbeat, C.QUERY_DATA_VERSION: self.query_data_version,
                C.GET_BROKER_MEMBER_GROUP: self.member_group, C.GET_NAMESRV_CONFIG: self.get_config,
                C.UPDATE_NAMESRV_CONFIG: self.update_config}

    def get_config(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """``getAllConfigsFormatString``: sorted ``key=value`` lines (no body when there is none)."""
        return cmd.response(ResponseCode.SUCCESS, None, None, config_text(self.config()))

    def update_config(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """Upstream's black list refused as upstream refuses it; this name server's own settings
        (its listener) cannot change while it runs and are refused by name; other keys are
        ignored (``mergeIfExist``)."""
        props, refused = config_update(cmd, NAMESRV_CONFIG_BLACK_LIST)
        if refused is not None:
            return refused
        fixed = sorted(set(props) & set(self.config()))
        if fixed:
            return cmd.response(ResponseCode.NO_PERMISSION, f"cannot change {', '.join(fixed)} while the name "
                                "server runs: restart it with the new setting")
        return cmd.response(ResponseCode.SUCCESS)

    def _refresh(self) -> None:
        if self.refresh is not None:
            self.refresh()

    # --- brokers ----------------------------------------------------------------------------------
    def register(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = Header(cmd)
        crc = h.int("bodyCrc32", 0)
        if crc != 0 and body_crc32(cmd.body) != crc:
            log.warning("REGISTER_BROKER from %s: crc32 not match", conn.peer)
            return cmd.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        try:
            topics, dv, _filters = decode_register_body(cmd.body, h.bool("compressed"))
        except RegisterBodyError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"Failed to decode RegisterBrokerBody: {e}")
        acting = h.str("enableActingMaster", None)
        timeout = h.long("heartbeatTimeoutMillis", None)
        reg = Registration(cluster=h.str("clusterName"), addr=h.str("brokerAddr"), name=h.str("brokerName"),
                           broker_id=h.long("brokerId"), ha_addr=h.str("haServerAddr"), topics=topics,
                           data_version=dv, timeout_ms=timeout,
                           acting_master=None if acting is None else acting.lower() == "true", channel=conn,
                           zone=h.str("zoneName", None))
        result = self.routes.register(reg)
        if result is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "register broker failed")
        orders = self.kv.namespace(ORDER_TOPIC_NAMESPACE)
        body = encode_fastjson({"table": orders}) if orders is not None else b""
        return cmd.response(ResponseCode.SUCCESS, None, {"haServerAddr": result.ha_server_addr,
                                                         "masterAddr": result.master_addr}, body)

    def unregister(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = Header(cmd)
        self.routes.unregister(h.str("clusterName"), h.str("brokerAddr"), h.str("brokerName"), h.long("brokerId"))
        return cmd.response(ResponseCode.SUCCESS)

    def heartbeat(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = Header(cmd)
        self.routes.renew(h.str("clusterName"), h.str("brokerAddr"))
        return cmd.response(ResponseCode.SUCCESS)

    def query_data_version(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = Header(cmd)
        cluster, addr = h.str("clusterName"), h.str("brokerAddr")
        try:
            dv = json.loads(cmd.body) if cmd.body else {}
        except ValueError:
            dv = {}
        changed = self.routes.version_changed(cluster, addr, dv if isinstance(dv, dict) else {})
        self.routes.renew(cluster, addr)
        live = self.routes.live.get((cluster, addr))
        body = encode_fastjson(live.data_version) if live is not None else b""
        return cmd.response(ResponseCode.SUCCESS, None, {"changed": changed}, body)

    def member_group(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = Header(cmd)
        group = self.routes.member_group(h.str("clusterName"), h.str("brokerName"))
        return cmd.response(ResponseCode.SUCCESS, None, None,
                            encode_fastjson({"brokerMemberGroup": group}, quote_int_keys=False))

    def wipe_perm(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        n = self.routes.write_perm(Header(cmd).str("brokerName"), add=False)
        return cmd.response(ResponseCode.SUCCESS, None, {"wipeTopicCount": n})

    def add_perm(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        n = self.routes.write_perm(Header(cmd).str("brokerName"), add=True)
        return cmd.response(ResponseCode.SUCCESS, None, {"addTopicCount": n})

    # --- clients and admin ----------------------------------------------------------------------
    def route(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = Header(cmd)
        topic = h.str("topic")
        self._refresh()
        data = self.routes.route(topic)
        if data is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: "
                                f"{topic}")
        standard = cmd.version >= _V4_9_4 or h.bool("acceptStandardJsonOnly")
        body = encode_fastjson(data, quote_int_keys=standard, ascii_only=standard)
        return cmd.response(ResponseCode.SUCCESS, None, None, body)

    def cluster_info(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        self._refresh()
        return cmd.response(ResponseCode.SUCCESS, None, None,
                            encode_fastjson(self.routes.cluster_info(), quote_int_keys=False))

    def all_topics(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        self._refresh()
        return cmd.response(ResponseCode.SUCCESS, None, None, encode_fastjson({"topicList": self.routes.all_topics()}))

    def cluster_topics(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        self._refresh()
        topics = self.routes.topics_of_cluster(Header(cmd).str("cluster"))
        return cmd.response(ResponseCode.SUCCESS, None, None, encode_fastjson({"topicList": topics}))

    def system_topics(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        self._refresh()
        topics, addr = self.routes.system_topics()
        return cmd.response(ResponseCode.SUCCESS, None, None,
                            encode_fastjson({"brokerAddr": addr, "topicList": topics}))

    def delete_topic(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = Header(cmd)
        self.routes.delete_topic(h.str("topic"), h.str("clusterName", None))
        return cmd.response(ResponseCode.SUCCESS)

    def register_topic(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        topic = Header(cmd).str("topic")
        try:
            doc = json.loads(cmd.body) if cmd.body else {}
        except ValueError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"the body is not a TopicRouteData: {e}")
        qds = doc.get("queueDatas") if isinstance(doc, dict) else None
        if isinstance(qds, list) and qds and all(isinstance(q, dict) and q.get("brokerName") for q in qds):
            self.routes.register_topic(topic, qds)
        return cmd.response(ResponseCode.SUCCESS)

    # --- KV config --------------------------------------------------------------------------------
    def put_kv(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = Header(cmd)
        ns, key = h.str("namespace", None), h.str("key", None)
        if ns is None or key is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "namespace or key is null")
        self.kv.put(ns, key, h.str("value", ""))
        return cmd.response(ResponseCode.SUCCESS)

    def get_kv(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = Header(cmd)
        ns, key = h.str("namespace"), h.str("key")
        value = self.kv.get(ns, key)
        if value is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns} Key: {key}")
        return cmd.response(ResponseCode.SUCCESS, None, {"value": value})

    def delete_kv(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = Header(cmd)
        self.kv.delete(h.str("namespace"), h.str("key"))
        return cmd.response(ResponseCode.SUCCESS)

    def kv_list(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        ns = Header(cmd).str("namespace")
        table = self.kv.namespace(ns)
        if table is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns}")
        return cmd.response(ResponseCode.SUCCESS, None, None, encode_fastjson({"table": table}))


class NameServer:
    """The standalone name server: a remoting server over one route table, expiring registrations
    every ``scan_interval_s``. ``with NameServer("127.0.0.1:0") as ns:`` runs it on a thread
    (``ns.address``); ``rmqstore namesrv`` runs it in the foreground (:meth:`serve`)."""

    def __init__(self, listen: str = "127.0.0.1:9876", *, scan_interval_s: float = SCAN_INTERVAL_S,
                 kv_config_path: str | None = None):
        """``kv_config_path``: RocketMQ's ``kvConfig.json`` to load and keep the KV config in (None:
        in memory only); a file that does not parse raises :class:`CorruptRecordError` here."""
        self.listen_host, self.listen_port = parse_listen(listen)
        self.scan_interval_s = scan_interval_s
        self.routes = RouteTable()
        self.kv = KVConfig(kv_config_path)
        self.processor = NameServerProcessor(self.routes, config=self._config, kv=self.kv)
        self.server = RemotingServer(self.processor.handlers(), on_disconnect=self.routes.on_channel_closed)
        self.address = ""
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._scan: asyncio.Task | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    def _config(self) -> dict[str, str]:
        port = self.address.rpartition(":")[2] or str(self.listen_port)
        out = {"bindAddress": self.listen_host, "listenPort": port,
               "scanNotActiveBrokerInterval": str(int(self.scan_interval_s * 1000))}
        if self.kv.path is not None:
            out["kvConfigPath"] = self.kv.path
        return out

    async def start_async(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        host, port = await self.server.start(self.listen_host, self.listen_port)
        shown = host if host not in ("0.0.0.0", "::") else "127.0.0.1"
        self.address = f"{shown}:{port}"
        self._scan = asyncio.ensure_future(self.routes.expire_every(self.scan_interval_s))
        log.info("name server listening on %s:%d", host, port)

    async def stop_async(self) -> None:
        self.server.stop_accepting()
        if self._scan is not None:
            self._scan.cancel()
        self.server.close_all()

    async def wait_stopped(self) -> None:
        await self._stop.wait()

    async def serve(self) -> None:
        """Start, run until :meth:`request_stop`, stop."""
        await self.start_async()
        self._started.set()
        await self._stop.wait()
        await self.stop_async()

    def request_stop(self) -> None:
        loop = self.loop
        if loop is not None and self._stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:
                pass

    def start(self) -> "NameServer":
        def main() -> None:
            try:
                asyncio.run(self.serve())
            except BaseException as e:  # noqa: BLE001 - reported to the starting thread
                self._error = e
                self._started.set()

        self._thread = threading.Thread(target=main, name="rmqstore-namesrv", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        self.request_stop()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def call(self, fn, *args):
        """Run ``fn(*args)`` on the server's loop and return its result (for tests and tools)."""
        import concurrent.futures

        fut: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001
                fut.set_exception(e)

        self.loop.call_soon_threadsafe(run)
        return fut.result(10)

    def __enter__(self) -> "NameServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


__all__ = ["NameServer", "NameServerProcessor", "NamesrvCode", "MASTER_ID", "body_crc32"]
