"""The HA service a store owns (upstream ``DefaultHAService``): for a master, the acceptor and one
:class:`~.master.SlaveConnection` per slave, the slaves' acknowledgements and the SYNC_MASTER
wait (``GroupTransferService``); for a slave, the :class:`~.slave.HAClient`.

SYNC_MASTER: :meth:`HAService.wait_replicated` resolves PUT_OK once ``max(1, inSyncReplicas - 1)``
slaves reported an offset at or past the put's end, FLUSH_SLAVE_TIMEOUT after ``slaveTimeout``,
SLAVE_NOT_AVAILABLE at once when fewer slaves than that are connected within
``haMaxGapNotInSync`` of the master's end (upstream 5.x with ``inSyncReplicas=1`` does not wait
at all; 4.9.8 waited for one slave, as here)."""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from concurrent.futures import Future

from ...types import PutMessageResult, PutMessageStatus
from .master import Acceptor, SlaveConnection
from .slave import HAClient

log = logging.getLogger("rmqstore.ha")

SLAVE, SYNC_MASTER = "SLAVE", "SYNC_MASTER"
#: connections a master serves at once (two threads each); more are closed at once
MAX_CONNECTIONS = 64


class HAService:
    """Replication for one store, by its ``brokerRole``."""

    def __init__(self, store, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.store = store
        self.cfg = store.cfg
        self.role = self.cfg.broker_role
        self._lock = threading.Lock()
        self._conns: list[SlaveConnection] = []
        self._acked = threading.Condition(self._lock)
        self._waiters: list = []          # heap of (deadline, seq, next_offset, future)
        self._seq = itertools.count()
        self._appended = threading.Condition(threading.Lock())
        self.append_seq = 0
        self._stopped = threading.Event()
        self.push_max = -1
        self.acceptor: Acceptor | None = None
        self.client: HAClient | None = None
        self._timer: threading.Thread | None = None
        if self.role == SLAVE:
            self.client = HAClient(self)
        else:
            self.acceptor = Acceptor(host, self.cfg.ha_listen_port if port is None else port, self._accept)
            log.info("HA service of %s listening on %s:%d", store.path, *self.acceptor.address)

    def start(self) -> "HAService":
        if self.client is not None:
            self.client.start()
        else:
            self._timer = threading.Thread(target=self._expire_loop, name="rmqstore-ha-wait", daemon=True)
            self._timer.start()
        return self

    def shutdown(self) -> None:
        """Stop accepting, close every connection, resolve waiting puts (FLUSH_SLAVE_TIMEOUT)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self.client is not None:
            self.client.stop()
        if self.acceptor is not None:
            self.acceptor.close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.close()
            c.join(5)
        with self._lock:
            waiters, self._waiters = self._waiters, []
            self._acked.notify_all()
        for _, _, _, fut in waiters:
            _resolve(fut, PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        if self._timer is not None:
            self.wake_senders()
            self._timer.join(5)

    # --- master: connections and acknowledgements ---------------------------------------------
    @property
    def address(self) -> tuple[str, int]:
        return tuple(self.acceptor.address) if self.acceptor is not None else ("", 0)

    def _accept(self, sock, peer: str) -> None:
        with self._lock:
            if self._stopped.is_set() or len(self._conns) >= MAX_CONNECTIONS:
                if not self._stopped.is_set():
                    log.warning("HA: connection from %s refused: %d connections already (threads and buffers "
                                "stay bounded)", peer, MAX_CONNECTIONS)
                sock.close()
                return
            conn = SlaveConnection(self, sock, peer)
            self._conns.append(conn)
        log.info("HA: slave %s connected", peer)
        conn.start()

    def connection_closed(self, conn: SlaveConnection) -> None:
        with self._lock:
            if conn in self._conns:
                self._conns.remove(conn)

    def slaves(self) -> list[tuple[str, int, float]]:
        """``(peer, last reported offset, time.monotonic() of that report)`` of each connected slave."""
        with self._lock:
            return [(c.peer, c.ack_offset, c.last_report) for c in self._conns]

    def push_to_slave_max_offset(self) -> int:
        """The highest offset any slave reported (upstream ``push2SlaveMaxOffset``)."""
        return self.push_max

    def on_ack(self, offset: int) -> None:
        with self._lock:
            if offset > self.push_max:
                self.push_max = offset
            if self._waiters:
                self._settle(time.monotonic())

    def _needed(self) -> int:
        return max(1, self.cfg.in_sync_replicas - 1)

    def _settle(self, now: float) -> float | None:
        """Under the lock: resolve the waiters acknowledged or timed out; the next deadline."""
        acks = sorted((c.ack_offset for c in self._conns), reverse=True)
        need = self._needed()
        enough = acks[need - 1] if len(acks) >= need else -1
        keep = []
        for item in self._waiters:
            deadline, _, offset, fut = item
            if enough >= offset:
                _resolve(fut, PutMessageStatus.PUT_OK)
            elif now >= deadline:
                _resolve(fut, PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
            else:
                keep.append(item)
        heapq.heapify(keep)
        self._waiters = keep
        return keep[0][0] if keep else None

    def _expire_loop(self) -> None:
        while not self._stopped.is_set():
            with self._lock:
                nxt = self._settle(time.monotonic()) if self._waiters else None
                wait = 0.5 if nxt is None else max(0.0, nxt - time.monotonic())
                self._acked.wait(min(wait, 0.5))

    def in_sync_slaves(self, offset: int) -> int:
        """Connected slaves that reported within ``haMaxGapNotInSync`` of ``offset``."""
        gap = self.cfg.ha_max_gap_not_in_sync
        with self._lock:
            return sum(1 for c in self._conns if c.ack_offset >= 0 and offset - c.ack_offset < gap)

    def wait_replicated(self, next_offset: int, wake: bool = True) -> Future:
        """A future resolving to PUT_OK once enough slaves reported ``>= next_offset``,
        FLUSH_SLAVE_TIMEOUT after ``slaveTimeout``, SLAVE_NOT_AVAILABLE at once when not enough
        slaves are connected and in sync. ``wake``: wake the senders (False: the caller just did)."""
        fut: Future = Future()
        if self.in_sync_slaves(next_offset) < self._needed():
            fut.set_result(PutMessageStatus.SLAVE_NOT_AVAILABLE)
            return fut
        deadline = time.monotonic() + self.cfg.slave_timeout / 1000
        with self._lock:
            if self._stopped.is_set():  # (shut down meanwhile: nobody would resolve it)
                fut.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
                return fut
            heapq.heappush(self._waiters, (deadline, next(self._seq), next_offset, fut))
            self._settle(time.monotonic())
            self._acked.notify_all()
        if wake:
            self.wake_senders()
        return fut

    # --- master: waking the senders ------------------------------------------------------------
    def wake_senders(self) -> None:
        """New data in the commitlog: the writers send it now."""
        cv = self._appended
        with cv:
            self.append_seq += 1
            cv.notify_all()

    def wait_append(self, seq: int, timeout: float) -> None:
        cv = self._appended
        with cv:
            if self.append_seq == seq and not self._stopped.is_set():
                cv.wait(timeout)

    # --- slave ---------------------------------------------------------------------------------
    @property
    def master_address(self) -> str | None:
        return self.client.master_address if self.client is not None else None

    def set_master_address(self, addr: str | None) -> None:
        if self.client is not None:
            self.client.set_master_address(addr)

    @property
    def master_connected(self) -> bool:
        return self.client is not None and self.client.connected

    def master_unreachable_ms(self) -> int:
        """0 while connected to the master (or for a master); else ms since the last read from it."""
        return self.client.unreachable_ms() if self.client is not None else 0

    # --- the put path --------------------------------------------------------------------------
    def settle(self, result: PutMessageResult, wait: bool = True) -> PutMessageResult:
        """The store's put path: wake the senders; with ``wait``, block until the put's final
        status (SYNC_MASTER) and set it on ``result``."""
        return self.settle_all([result], wait)[0]

    def settle_all(self, results: list[PutMessageResult], wait: bool = True) -> list[PutMessageResult]:
        """:meth:`settle` for the results of one group commit: the senders woken once (not again
        per put)."""
        self.wake_senders()
        for result in results if wait else ():
            fut = self.replication_future(result, wake=False)
            if fut is not None:
                result.status = fut.result()
        return results

    def replication_future(self, result: PutMessageResult, wake: bool = True) -> Future | None:
        """Under SYNC_MASTER, a future of a put's final status (:meth:`wait_replicated`); None
        when there is nothing to wait for (not SYNC_MASTER, or the put failed)."""
        if self.role != SYNC_MASTER or result.status is not PutMessageStatus.PUT_OK:
            return None
        return self.wait_replicated(result.phy_offset + result.wrote_bytes, wake)


def _resolve(fut: Future, status: PutMessageStatus) -> None:
    if not fut.done():
        fut.set_result(status)
