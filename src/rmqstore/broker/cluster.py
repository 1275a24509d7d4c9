"""The broker as a member of a cluster: its role, its registration with the name servers, the
embedded name server when it has none, the HA service's start, and the slave's refusals.

- Role (``brokerRole`` of broker.conf, the store's setting): a master is broker id 0 whatever
  ``brokerId`` says; a SLAVE needs ``brokerId`` > 0 (upstream's start refuses otherwise).
- With ``namesrvAddr`` the broker registers with every name server at start and every
  ``registerNameServerPeriod`` (kept within 10-60 s, as upstream), and unregisters at shutdown. A
  slave takes its master's HA address and broker address from the replies (a static
  ``haMasterAddress`` wins) and runs SlaveSynchronize (:mod:`.slave`) every 10 s and whenever its
  master changes. Without ``namesrvAddr`` the broker is its own name server: it registers itself in
  its own route table, and other brokers may register there too.
- A slave refuses sends (SYSTEM_BUSY "[REJECTREQUEST]system busy...", as 5.x rejects them) and
  END_TRANSACTION (SLAVE_NOT_AVAILABLE); it refuses pulls (SYSTEM_BUSY) unless ``slaveReadEnable``,
  or -- beyond upstream -- when its master has been unreachable for ``haHousekeepingInterval``, so
  that consumers drain a slave whose master is gone.
"""
from __future__ import annotations

import asyncio
import logging
import time

from .metadata import PERM_READ
from .namesrv import SCAN_INTERVAL_S, NameServerProcessor, body_crc32
from .outer import BrokerOuterAPI, RemotingClient, split_addresses
from .remoting import RemotingCommand, RequestCode, ResponseCode
from .server import RemotingServer
from .routes import MASTER_ID, Registration, RouteTable, encode_fastjson
from .slave import SlaveSync

log = logging.getLogger("rmqstore.broker")

SLAVE = "SLAVE"
#: SlaveSynchronize's period (4.9.8's 10 s; 5.x: 60 s)
SYNC_PERIOD_S = 10.0
REJECT_REMARK = "[REJECTREQUEST]system busy, start flow control for a while"
_SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
               RequestCode.CONSUMER_SEND_MSG_BACK)
_PULL_CODES = (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE)
#: a live entry of the embedded name server never expires
_FOREVER_MS = 1 << 62


def broker_role(store) -> str:
    return str(getattr(store.cfg, "broker_role", "ASYNC_MASTER") or "ASYNC_MASTER").upper()


def ha_port(store, listen_port: int) -> int:
    """The HA port: ``haListenPort`` when broker.conf sets one other than its default, else the
    listen port + 1 (upstream's rule for the default ports); 0 (any) when listening on port 0."""
    configured = int(getattr(store.cfg, "ha_listen_port", 0) or 0)
    if configured > 0 and configured != 10912:
        return configured
    return listen_port + 1 if listen_port else 0


class ClusterMember:
    def __init__(self, broker, namesrv_addr: str | None = None):
        self.broker = broker
        cfg = broker.cfg
        self.role = broker_role(broker.store)
        self.is_slave = self.role == SLAVE
        if self.is_slave and cfg.broker_id <= MASTER_ID:
            raise ValueError("Slave's brokerId must be > 0 (brokerRole=SLAVE needs brokerId=1 or more)")
        self.broker_id = cfg.broker_id if self.is_slave else MASTER_ID
        self.namesrv_addrs = split_addresses(namesrv_addr if namesrv_addr is not None else cfg.namesrv_addr)
        self.embedded = not self.namesrv_addrs
        self.routes = RouteTable()
        self.client = RemotingClient()
        self.outer = BrokerOuterAPI(self.namesrv_addrs, self.client)
        self.sync = SlaveSync(broker, self.client)
        self.namesrv = (NameServerProcessor(self.routes, refresh=self.register_locally, config=self.namesrv_config)
                        if self.embedded else None)
        self.master_addr: str | None = None
        self.ha_master_addr: str | None = None
        self.ha = None
        self.ha_addr = ""
        self._tasks: list[asyncio.Task] = []
        self._local_version: tuple | None = None
        self.registrations = 0
        self.fast_server: RemotingServer | None = None
        #: seconds between the embedded name server's expiry scans
        self.expire_scan_s = SCAN_INTERVAL_S

    # --- handlers -------------------------------------------------------------------------------
    def handlers(self) -> dict:
        out = dict(self.sync.handlers())
        if self.namesrv is not None:
            out.update(self.namesrv.handlers())
        return out

    def guard(self, handlers: dict) -> dict:
        """The handlers with the slave's refusals in front (a master's are unchanged)."""
        if not self.is_slave:
            return handlers
        out = dict(handlers)
        for code in _SEND_CODES:
            if code in out:
                out[code] = self._refuse_send
        if RequestCode.END_TRANSACTION in out:
            out[RequestCode.END_TRANSACTION] = self._refuse_end_transaction
        for code in _PULL_CODES:
            if code in out:
                out[code] = self._pull_guard(out[code])
        return out

    def _refuse_send(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SYSTEM_BUSY, REJECT_REMARK)

    def _refuse_end_transaction(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SLAVE_NOT_AVAILABLE)

    def _pull_guard(self, handler):
        def pull(conn, cmd: RemotingCommand):
            if not self.slave_serves_reads():
                return cmd.response(ResponseCode.SYSTEM_BUSY, REJECT_REMARK)
            self._adopt_replicated_topic(cmd.ext.get("topic"))
            return handler(conn, cmd)
        return pull

    def _adopt_replicated_topic(self, topic: str | None) -> None:
        """A topic whose messages were replicated before SlaveSynchronize brought its config (or
        whose master died first) gets a config from the queues the slave holds, so that consumers
        can drain it (upstream answers TOPIC_NOT_EXIST until the next sync)."""
        b = self.broker
        if topic and b.topics.get(topic) is None:
            held = b.store.topics().get(topic)
            if held:
                b.topics.adopt({topic: held})

    def slave_serves_reads(self) -> bool:
        """``slaveReadEnable``, or (beyond upstream) a master unreachable for ``haHousekeepingInterval``."""
        cfg = self.broker.cfg
        if cfg.slave_read_enable:
            return True
        if not cfg.slave_read_when_master_gone:
            return False
        return self.master_unreachable_ms() >= int(getattr(self.broker.store.cfg, "ha_housekeeping_interval", 20000))

    def master_unreachable_ms(self) -> int:
        ha = self.ha
        if ha is None or not hasattr(ha, "master_unreachable_ms"):
            return 0
        return int(ha.master_unreachable_ms())

    def suggest_broker_id(self, group_cfg: dict, pulled_phy_end: int | None) -> int:
        """``suggestWhichBrokerId`` of a pull answer: with ``slaveReadEnable``, the group's
        ``whichBrokerWhenConsumeSlowly`` (1) when the consumer is further behind the commitlog's end
        than ``accessMessageInMemoryMaxRatio`` % of RAM, else its ``brokerId`` (0); else 0."""
        if not self.broker.cfg.slave_read_enable:
            return MASTER_ID
        store = self.broker.store
        slow = pulled_phy_end is not None and store.max_phy_offset - pulled_phy_end > store.memory_limit_bytes()
        key = "whichBrokerWhenConsumeSlowly" if slow else "brokerId"
        return int(group_cfg.get(key, 1 if slow else 0))

    def on_commit(self, group: str, topic: str, queue_id: int) -> None:
        if self.is_slave:
            self.sync.on_commit(group, topic, queue_id)

    def on_disconnect(self, conn) -> None:
        if self.embedded:
            self.routes.on_channel_closed(conn)

    # --- registration ---------------------------------------------------------------------------
    def _topics_for_registration(self) -> dict:
        b = self.broker
        perm_mask = PERM_READ if b.read_only else b.cfg.broker_permission
        out = {}
        for name, tc in b.topics.table.items():
            if perm_mask & 6 != 6:
                tc = dict(tc, perm=int(tc.get("perm", 6)) & perm_mask)
            out[name] = tc
        return out

    def _data_version(self) -> dict:
        return self.broker.topics.file.data_version()

    def namesrv_config(self) -> dict[str, str]:
        """The embedded name server's settings (GET_NAMESRV_CONFIG): it listens where the broker does."""
        b = self.broker
        return {"bindAddress": b.listen_host, "listenPort": str(b.server_port or b.listen_port)}

    def register_locally(self) -> None:
        """The embedded name server's entry for its own broker (refreshed when topics change)."""
        b = self.broker
        version = (b.topics.file.counter, len(b.topics.table), b.read_only)
        if version == self._local_version and (b.cfg.broker_cluster_name, b.advertised) in self.routes.live:
            return
        self.routes.register(Registration(
            cluster=b.cfg.broker_cluster_name, addr=b.advertised, name=b.cfg.broker_name, broker_id=self.broker_id,
            ha_addr=self.ha_addr or None, topics=self._topics_for_registration(),
            data_version=dict(self._data_version(), counter=hash(version) & 0x7FFFFFFF),
            timeout_ms=_FOREVER_MS, acting_master=False))
        self._local_version = version

    def register_request(self) -> tuple[dict, bytes]:
        """REGISTER_BROKER's header fields and body, as ``BrokerOuterAPI.registerBrokerAll`` builds them."""
        b = self.broker
        wrapper = {"dataVersion": self._data_version(), "mappingDataVersion": {"counter": 0, "stateVersion": 0,
                                                                               "timestamp": 0},
                   "topicConfigTable": self._topics_for_registration(), "topicQueueMappingDetailMap": {},
                   "topicQueueMappingInfoMap": {}}
        body = encode_fastjson({"filterServerList": [], "topicConfigSerializeWrapper": wrapper})
        ext = {"brokerAddr": b.advertised, "brokerId": self.broker_id, "brokerName": b.cfg.broker_name,
               "clusterName": b.cfg.broker_cluster_name, "haServerAddr": self.ha_addr, "enableActingMaster": False,
               "compressed": False, "bodyCrc32": body_crc32(body)}
        return ext, body

    async def register_all(self) -> None:
        ext, body = self.register_request()
        results = await self.outer.register_all(ext, body)
        self.registrations += 1
        if self.is_slave:
            for _, r in results:
                if isinstance(r, RemotingCommand) and r.code == ResponseCode.SUCCESS:
                    self._master_from_reply(r.ext.get("masterAddr"), r.ext.get("haServerAddr"))
                    break

    def _master_from_reply(self, master: str | None, ha_addr: str | None) -> None:
        changed = master != self.master_addr
        if changed:
            log.info("slave: master %s (HA %s)", master or "none live", ha_addr or "-")
        self.master_addr = master or None
        self.sync.master_addr = self.master_addr
        if ha_addr and ha_addr != self.ha_master_addr:
            self.ha_master_addr = ha_addr
            static = getattr(self.broker.store.cfg, "ha_master_address", None)
            if self.ha is not None and hasattr(self.ha, "set_master_address") and not static:
                self.ha.set_master_address(ha_addr)
        if changed and self.master_addr:
            self._tasks.append(asyncio.ensure_future(self.sync.sync_all()))

    def unregister_ext(self) -> dict:
        b = self.broker
        return {"brokerName": b.cfg.broker_name, "brokerAddr": b.advertised, "clusterName": b.cfg.broker_cluster_name,
                "brokerId": self.broker_id}

    # --- lifecycle ------------------------------------------------------------------------------
    def start_ha(self) -> None:
        """``store.start_ha`` on the broker's listen host and HA port (every role)."""
        b = self.broker
        store = b.store
        start = getattr(store, "start_ha", None)
        host = b.cfg.broker_ip2 or b.advertised_host
        if start is None or b.read_only:
            return
        try:
            self.ha = start(b.listen_host, ha_port(store, b.listen_port))
        except OSError as e:
            if not self.embedded or self.role != "ASYNC_MASTER":
                raise
            # the one-process broker serves without replication rather than not at all
            log.warning("HA port %d not available (%s): no slave can replicate from this broker",
                        ha_port(store, b.listen_port), e)
            return
        address = None if self.is_slave else getattr(self.ha, "address", None)
        if address and address[1]:
            self.ha_addr = f"{host}:{address[1]}"

    async def start_fast_port(self) -> None:
        """Also serve on the listen port - 2, the "VIP channel" upstream's brokers listen on: a Java
        slave asks its master for topics there (``MixAll.brokerVIPChannel``). A port in use is logged
        and skipped."""
        b = self.broker
        if b.listen_port <= 2 or self.embedded:
            return
        self.fast_server = RemotingServer(b.server.handlers, on_disconnect=b.server.on_disconnect)
        try:
            await self.fast_server.start(b.listen_host, b.listen_port - 2)
        except OSError as e:
            log.warning("the VIP channel port %d is not available (%s): Java slaves cannot sync topics",
                        b.listen_port - 2, e)
            self.fast_server = None

    async def start(self) -> None:
        self.start_ha()
        if self.embedded:
            self.register_locally()
            self._tasks.append(asyncio.ensure_future(self.routes.expire_every(self.expire_scan_s)))
            return
        await self.start_fast_port()
        await self.register_all()
        self._tasks.append(asyncio.ensure_future(self._register_loop()))
        if self.is_slave:
            self._tasks.append(asyncio.ensure_future(self._sync_loop()))

    def _topics_version(self) -> tuple:
        b = self.broker
        return b.topics.file.counter, len(b.topics.table)

    async def _register_loop(self) -> None:
        """Every ``registerNameServerPeriod``, and within a second of a topic's creation or change
        (upstream registers at once when a topic is created, by an admin or a send)."""
        period = max(10.0, min(self.broker.cfg.register_name_server_period / 1000, 60.0))
        last, version = time.monotonic(), self._topics_version()
        while True:
            await asyncio.sleep(1.0)
            if time.monotonic() - last < period and self._topics_version() == version:
                continue
            last, version = time.monotonic(), self._topics_version()
            try:
                await self.register_all()
            except Exception:  # noqa: BLE001 - the next round retries
                log.exception("registration with the name servers failed")

    async def _sync_loop(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            if time.monotonic() - last >= SYNC_PERIOD_S:
                last = time.monotonic()
                try:
                    await self.sync.sync_all()
                except Exception:  # noqa: BLE001 - the next round retries
                    log.exception("slave sync failed")

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        if self.fast_server is not None:
            self.fast_server.stop_accepting()
            self.fast_server.close_all()
        if not self.embedded:
            await self.outer.unregister_all(self.unregister_ext())
        self.client.close()
        if self.ha is not None:  # the broker started replication: it stops it (the store's close would too)
            self.ha = None
            stop = getattr(self.broker.store, "stop_ha", None)
            if stop is not None:
                stop()

