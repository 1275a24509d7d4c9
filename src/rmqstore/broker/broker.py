"""``Broker``: a RocketMQ broker and name server over one :class:`~rmqstore.MessageStore`.

Startable from Python (``with Broker(store, listen="127.0.0.1:0") as broker:`` runs it on a
background thread; ``broker.address`` is where clients connect) or as the foreground process of
``rmqstore serve`` (:meth:`Broker.run`). The store never imports this package: the broker uses the
store's public API and its dispatch notification.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time

from ..format.msgid import UniqKeyGenerator
from ..message_store import MessageStore
from .admin import AdminProcessor
from .admin_ops import AdminOps
from .clients import ClientManager, RebalanceLocks
from .cluster import ClusterMember
from .config import BrokerConfig
from .metadata import DelayOffsets, SubscriptionGroupManager, TopicConfigManager
from .pop import PopService
from .pull import PullProcessor
from .remoting import RequestCode
from .schedule import ScheduleService
from .send import SendProcessor
from .group_commit import PutGroups
from .server import RemotingServer, parse_listen  # noqa: F401 - parse_listen: the CLI's name for it
from .timer import TimerService
from .traffic import Traffic
from .transaction import TransactionProcessor
from ..io import paths

log = logging.getLogger("rmqstore.broker")

#: ms between writes of the broker's state files that change often (delay offsets)
PERSIST_INTERVAL_S = 5.0
RATE_INTERVAL_S = 5.0
#: the least time between two dispatch rounds after group commits on the event loop
DISPATCH_COALESCE_S = 0.001


class Stats:
    """Counters for the rate line."""

    def __init__(self) -> None:
        self.puts = self.gets = 0
        self._last = (time.monotonic(), 0, 0)

    def put(self, n: int) -> None:
        self.puts += n

    def got(self, n: int) -> None:
        self.gets += n

    def rate_line(self, connections: int) -> str | None:
        now = time.monotonic()
        t0, p0, g0 = self._last
        if self.puts == p0 and self.gets == g0:
            return None
        self._last = (now, self.puts, self.gets)
        dt = max(1e-6, now - t0)
        return (f"{(self.puts - p0) / dt:,.0f} msgs/s in, {(self.gets - g0) / dt:,.0f} msgs/s out, "
                f"{connections} connections")


def replication_wait(store: MessageStore, result):
    """HA: under SYNC_MASTER an awaitable of ``result``'s final status (PUT_OK once enough slaves
    reported past it, FLUSH_SLAVE_TIMEOUT after slaveTimeout, SLAVE_NOT_AVAILABLE), resolved
    without blocking a thread; None when there is nothing to wait for."""
    ha = store.ha
    fut = ha.replication_future(result) if ha is not None else None
    return None if fut is None else asyncio.wrap_future(fut)


async def _answer_when(waiting, result, answer):
    result.status = await waiting
    return answer(result)


class Broker:
    """The broker: remoting server, processors, state managers, delay and transaction services."""

    def __init__(self, store: MessageStore, config: BrokerConfig | None = None, *, listen: str = "127.0.0.1:9876",
                 grpc_listen: str | None = None, grpc_tls: tuple[str, str] | None = None,
                 namesrv_addr: str | None = None, http=None):
        """``grpc_listen`` (``HOST:PORT``) also starts the gRPC ``MessagingService`` of RocketMQ 5's
        clients; ``grpc_tls`` is ``(certificate chain PEM path, private key PEM path)`` for TLS.
        ``namesrv_addr`` (``a:9876;b:9876``, default broker.conf's ``namesrvAddr``) registers with
        those name servers; without any, the broker is its own name server. ``http``
        (:class:`~rmqstore.broker.http.HttpOptions`) starts metrics, JSON API and console."""
        self.store = store
        store.ha_wait_in_put = False  # HA: put() awaits the slaves' acknowledgement (replication_wait)
        self.cfg = config or BrokerConfig()
        self.read_only = store.read_only
        self.listen_host, self.listen_port = parse_listen(listen)
        root = store.path
        self.topics = TopicConfigManager(os.path.join(root, paths.TOPICS_FILE), read_only=self.read_only,
                                         broker_name=self.cfg.broker_name,
                                         cluster_name=self.cfg.broker_cluster_name,
                                         auto_create=self.cfg.auto_create_topic_enable,
                                         default_queue_nums=self.cfg.default_topic_queue_nums)
        self.topics.adopt(store.topics())
        self.groups = SubscriptionGroupManager(os.path.join(root, paths.SUBSCRIPTION_GROUP_FILE),
                                               read_only=self.read_only,
                                               auto_create=self.cfg.auto_create_subscription_group)
        self.delay_offsets = DelayOffsets(os.path.join(root, paths.DELAY_OFFSET_FILE), read_only=self.read_only)
        self.delay_levels_ms = store.cfg.delay_levels_ms
        self.clients = ClientManager()
        self.locks = RebalanceLocks()
        self.stats = Stats()
        self.traffic = Traffic()
        self.http_options, self.http = http, None
        self.advertised = ""
        self.server_port = 0
        self.advertised_host = ""
        self.store_host = store.cfg.store_host
        self._uniq = UniqKeyGenerator()
        self.pulls = PullProcessor(self)
        self.transactions = TransactionProcessor(self)
        self.schedule = ScheduleService(self)
        self.pops = PopService(self)
        self.timer = TimerService(self)
        self.grpc_listen = parse_listen(grpc_listen) if grpc_listen else None
        self.grpc_tls = grpc_tls
        self.grpc_address = ""
        self.messaging = None
        self._grpc_server = None
        handlers: dict = {}
        self.cluster = ClusterMember(self, namesrv_addr)
        self.admin_ops = AdminOps(self)
        for proc in (SendProcessor(self), self.pulls, AdminProcessor(self), self.admin_ops, self.transactions,
                     self.cluster):
            handlers.update(proc.handlers())
        self.server = RemotingServer(self.cluster.guard(handlers), on_disconnect=self._on_disconnect)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping = False
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._stop_event: asyncio.Event | None = None
        self._start_error: BaseException | None = None
        self._inline_dispatch = False
        self._dispatch_scheduled = False
        self._last_dispatch = 0.0
        self.put_groups: PutGroups | None = None
        self._loop_thread = 0

    # --- addresses ----------------------------------------------------------------------------------
    @property
    def address(self) -> str:
        """``host:port`` clients use as their name server address (the advertised address)."""
        return self.advertised

    def new_uniq_key(self) -> str:
        return self._uniq.new()

    # --- lifecycle ------------------------------------------------------------------------------------
    async def start_async(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        host, port = await self.server.start(self.listen_host, self.listen_port)
        self.server_port = port
        shown = self.cfg.broker_ip1 or (host if host not in ("0.0.0.0", "::") else "127.0.0.1")
        self.advertised_host = shown
        self.advertised = f"{shown}:{self.cfg.listen_port or port}"
        if self.store.cfg.store_host == "127.0.0.1:10911" and not self.read_only:
            self.store_host = self.advertised  # what offsetMsgIds name: where this broker answers
        self.put_groups = PutGroups(self, sync=self.store.cfg.sync_flush)
        self.server.after_read = self.put_groups.read_done
        self.store.add_dispatch_listener(self._on_dispatched)
        self._loop_thread = threading.get_ident()
        self._inline_dispatch = not self.read_only and not self.store.cfg.sync_flush and not self.cluster.is_slave
        if self._inline_dispatch:
            # dispatch on this thread after the puts of each loop pass: no thread switch per message
            # (the GIL hand-offs cost more than the dispatch), and a pass's puts go in one batch
            self.store.set_background_dispatch(False)
        self._tasks = [asyncio.ensure_future(self._housekeeping())]
        await self.cluster.start()
        if not self.read_only and not self.cluster.is_slave:  # a slave's store changes by replication only
            self.pops.recover()
            self._tasks += [asyncio.ensure_future(self.schedule.run()),
                            asyncio.ensure_future(self.transactions.run_checks()),
                            asyncio.ensure_future(self.timer.run()),
                            asyncio.ensure_future(self._revive())]
        if self.grpc_listen is not None:
            await self._start_grpc(shown)
        if self.http_options is not None:
            from .http import start_http
            self.http = await start_http(self, self.http_options)
        log.info("listening on %s:%d (broker %s, cluster %s, advertised %s%s)", host, port, self.cfg.broker_name,
                 self.cfg.broker_cluster_name, self.advertised, ", read-only" if self.read_only else "")

    async def _start_grpc(self, shown_host: str) -> None:
        import grpc

        from .messaging.protocol import generic_handler
        from .messaging.service import MessagingService

        host, port = self.grpc_listen
        limit = 2 * self.store.cfg.max_message_size + (1 << 20)
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit),
                                          ("grpc.max_send_message_length", limit),
                                          ("grpc.so_reuseport", 0)])
        self.messaging = MessagingService(self)
        server.add_generic_rpc_handlers((generic_handler(self.messaging),))
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if self.grpc_tls is not None:
            cert, key = self.grpc_tls
            with open(cert, "rb") as f:
                chain = f.read()
            with open(key, "rb") as f:
                private = f.read()
            bound = server.add_secure_port(address, grpc.ssl_server_credentials([(private, chain)]))
        else:
            bound = server.add_insecure_port(address)
        if not bound:
            raise OSError(f"gRPC endpoint: cannot listen on {address}")
        await server.start()
        self._grpc_server = server
        self.messaging.endpoint = (shown_host, bound)
        self.grpc_address = f"{shown_host}:{bound}"
        log.info("gRPC MessagingService on %s:%d%s", host, bound, " (TLS)" if self.grpc_tls else "")

    async def _revive(self) -> None:
        """Redeliver what was received and not acked in time (the pop revive service)."""
        while True:
            await asyncio.sleep(0.1)
            try:
                self.pops.revive_due(alive=self.messaging.client_alive if self.messaging else None)
            except Exception:  # noqa: BLE001 - retried on the next round
                log.exception("revive failed")

    async def stop_async(self, drain_s: float = 5.0) -> None:
        """Stop accepting, answer what is in flight (held pulls are answered now), persist state."""
        self.stopping = True
        await self.cluster.stop()
        self.server.stop_accepting()
        self.pulls.wake_all()
        if self._grpc_server is not None:
            await self._grpc_server.stop(min(drain_s, 1.0))
            self._grpc_server = None
        if self.http is not None:
            await self.http.stop()
        if self.put_groups is not None:
            await self.put_groups.drain(drain_s)
        await self.server.drain(drain_s)
        for t in getattr(self, "_tasks", []):
            t.cancel()
        self.server.close_all()
        self.store.remove_dispatch_listener(self._on_dispatched)
        if self._inline_dispatch:
            self.store.set_background_dispatch(True)
            self.store.dispatch()
        if self.put_groups is not None:
            self.put_groups.stop()
        self.persist()

    def persist(self) -> None:
        if self.read_only:
            return
        self.delay_offsets.persist()
        self.timer.persist()
        self.store.consumer_offsets.persist()

    async def wait_stopped(self) -> None:
        """Return once :meth:`request_stop` was called."""
        await self._stop_event.wait()

    async def serve_until_stopped(self) -> None:
        await self.start_async()
        self._started.set()
        await self.wait_stopped()
        await self.stop_async()

    def request_stop(self) -> None:
        """Ask a running broker to stop (thread-safe; also from a signal handler)."""
        loop = self.loop
        if loop is not None and self._stop_event is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._stop_event.set)
            except RuntimeError:  # closed meanwhile: already stopped
                pass

    def start(self) -> "Broker":
        """Run on a background thread; returns once it accepts connections."""
        def main() -> None:
            try:
                asyncio.run(self.serve_until_stopped())
            except BaseException as e:  # noqa: BLE001 - reported to the starting thread
                self._start_error = e
                self._started.set()
                if not isinstance(e, OSError):
                    log.exception("broker stopped on an error")

        self._thread = threading.Thread(target=main, name="rmqstore-broker", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._start_error is not None:
            raise self._start_error
        return self

    def stop(self) -> None:
        self.request_stop()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None

    def __enter__(self) -> "Broker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- used by the processors -------------------------------------------------------------------
    def put(self, msgs, answer):
        """Store ``msgs`` (one message, or a batch for one queue) and answer ``answer(result)``. On
        the event loop the puts of one pass are appended as one group after the pass
        (:class:`~.group_commit.PutGroups`), and this returns a :class:`~.server.Deferred` of the
        answer (awaitable); elsewhere it puts at once and returns the answer."""
        if self.loop is None or threading.get_ident() != self._loop_thread or self.put_groups is None:
            result = self.put_items([msgs])[0]
            self.schedule_dispatch()
            waiting = replication_wait(self.store, result)  # HA: SYNC_MASTER answers once a slave has it
            return answer(result) if waiting is None else _answer_when(waiting, result, answer)
        return self.put_groups.submit(msgs, answer)

    def put_items(self, items: list[list]) -> list:
        """The put of a group (on the event loop, or on the group-commit thread under SYNC_FLUSH): one
        ``PutMessageResult`` per item, from which each answer is then produced (under SYNC_MASTER once
        a slave has acknowledged it: :meth:`PutGroups.answer <.group_commit.PutGroups.answer>`)."""
        return self.store.put_group(items)

    def schedule_dispatch(self) -> None:
        """After puts on the event loop: dispatch once the loop has handled what is ready."""
        if self._inline_dispatch and not self._dispatch_scheduled and self.loop is not None:
            self._dispatch_scheduled = True
            self.loop.call_soon(self.dispatch_now)

    def dispatch_after_puts(self, group_size: int) -> None:
        """After a group's answers: dispatch in this callback, or, when the group came from several
        sends at once and the last round was less than ``DISPATCH_COALESCE_S`` ago, once that much
        time has passed: under concurrent load a round then takes the groups of that time
        (upstream's reput runs a round every millisecond). A lone send is dispatched at once: its
        producer prepares the next one meanwhile, where a timer would delay that one instead (a
        1 ms timer for lone sends too made rounds of ~3 records, but a sync producer's rate fell:
        the round then ran when its next send arrived)."""
        if not self._inline_dispatch or self._dispatch_scheduled:
            return
        wait = self._last_dispatch + DISPATCH_COALESCE_S - time.monotonic() if group_size > 1 else 0
        if wait <= 0:
            self.dispatch_now()
        else:
            self._dispatch_scheduled = True
            self.loop.call_later(wait, self._dispatch_due)

    def _dispatch_due(self) -> None:
        """The coalescing time is up: dispatch, unless a group is about to be put in this pass of
        the loop (it then dispatches after its answers, its records in the same round, without
        delaying them)."""
        self._dispatch_scheduled = False
        groups = self.put_groups
        if groups is not None and groups.scheduled:
            self._last_dispatch = 0.0  # (the group's commit dispatches at once)
            return
        self.dispatch_now()

    def dispatch_now(self) -> None:
        """Dispatch what the puts on the event loop appended (ASYNC_FLUSH; under SYNC_FLUSH the
        background dispatcher follows the flushes)."""
        self._dispatch_scheduled = False
        if not self._inline_dispatch:
            return
        try:
            self.store.dispatch()
        except Exception:  # noqa: BLE001 - the background dispatcher retries within 50 ms
            log.exception("dispatch failed")
        self._last_dispatch = time.monotonic()

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.store.consumer_offsets.commit_offset(group, topic, queue_id, offset)
        self.cluster.on_commit(group, topic, queue_id)

    def notify_consumer_ids_changed(self, group: str | None) -> None:
        if not group:
            return
        g = self.clients.consumers.get(group)
        for conn in list(g.channels) if g else []:
            conn.send_request_oneway(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group})

    # --- callbacks ------------------------------------------------------------------------------------
    def _on_dispatched(self, queues) -> None:
        """From the store's dispatch thread: wake held pulls on the event loop."""
        loop = self.loop
        if not self.pulls.waiters:
            return  # nobody holds a pull (a pull held later checks the queue after registering)
        if threading.get_ident() == self._loop_thread:
            self.pulls.notify(set(queues))
        elif loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self.pulls.notify, set(queues))
            except RuntimeError:  # the loop closed meanwhile
                pass

    def _on_disconnect(self, conn) -> None:
        self.cluster.on_disconnect(conn)
        for group in self.clients.remove_connection(conn):
            self.notify_consumer_ids_changed(group)

    async def _housekeeping(self) -> None:
        last_persist = last_rate = time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            self.admin_ops.windows.sample()
            if self.messaging is not None:
                self.messaging.expire_clients(self.cfg.channel_expired_timeout / 1000)
            for conn in self.clients.expire(self.cfg.channel_expired_timeout / 1000):
                log.info("closing %s: no heartbeat for %d ms", conn.peer, self.cfg.channel_expired_timeout)
                if conn.transport is not None:
                    conn.transport.close()
            if now - last_rate >= RATE_INTERVAL_S:
                last_rate = now
                line = self.stats.rate_line(len(self.server.connections))
                if line:
                    log.info("%s", line)
            if now - last_persist >= PERSIST_INTERVAL_S and not self.read_only:
                last_persist = now
                await asyncio.get_running_loop().run_in_executor(None, self.delay_offsets.persist)
