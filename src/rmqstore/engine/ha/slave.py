"""The slave's side of the classic HA protocol (``DefaultHAClient``): connect to the master's HA
address, report the commitlog's max offset, append each complete frame at exactly that offset,
report again as it grows (or every ``haSendHeartbeatInterval``), reconnect after a mismatch, a
cut or silent connection (``haHousekeepingInterval``).

Beyond upstream, the rejoin check: on its first connection (and after its master changes) a
slave that holds data reports an offset ``haRejoinCheckBytes`` before its end and compares what
the master sends with its own bytes. Where they first differ, its tail is one the master never
had (it was a master itself and was replaced): the tail is cut (kept under ``recovery/``) and
replication goes on from there. A window in which no whole message matches (or of which the
master holds nothing) is made larger, up to the start of the commitlog; a commitlog that differs
from its master's from its first message is not cut (a wrong master), only reported."""
from __future__ import annotations

import logging
import select
import socket
import threading
import time

import numpy as np

from ...errors import HAProtocolError, StoreIOError
from .protocol import FrameReader, encode_report
from .replica import append_replicated, complete_records_end, cut_tail

log = logging.getLogger("rmqstore.ha")

AGAIN, WAIT = "again", "wait"


def split_address(addr: str) -> tuple[str, int]:
    host, _, port = addr.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"HA master address {addr!r}: expected host:port")
    return host.strip("[]"), int(port)


class Check:
    """The rejoin check of one connection: own bytes ``[cursor, end)`` still to compare."""

    __slots__ = ("start", "cursor", "end")

    def __init__(self, start: int, end: int) -> None:
        self.start = self.cursor = start
        self.end = end


class HAClient:
    """The slave's replication thread."""

    def __init__(self, service) -> None:
        self.service = service
        self.cfg = service.cfg
        self.cl = service.store.commit_log
        self._address: str | None = None
        self.connected = False
        self.last_read = time.monotonic()
        self._check_pending = self.cfg.ha_rejoin_check_bytes > 0
        self._window = self.cfg.ha_rejoin_check_bytes
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._kick = threading.Event()
        self._frames = FrameReader()
        self._last_complaint = ""
        self._thread = threading.Thread(target=self._run, name="rmqstore-ha-slave", daemon=True)

    # --- control -------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._kick.set()
        self._drop_socket()
        self._thread.join(10)

    @property
    def master_address(self) -> str | None:
        static = self.cfg.ha_master_address
        return static if static and len(static) >= 6 else self._address

    def set_master_address(self, addr: str | None) -> None:
        if self.cfg.ha_master_address and len(self.cfg.ha_master_address) >= 6:
            return  # a static address wins (upstream: haMasterAddress of 6+ characters)
        if addr != self._address:
            log.info("HA master address %s -> %s", self._address, addr)
            self._address = addr
            self._check_pending = self.cfg.ha_rejoin_check_bytes > 0
            self._drop_socket()
            self._kick.set()

    def unreachable_ms(self) -> int:
        return 0 if self.connected else int((time.monotonic() - self.last_read) * 1000)

    def _drop_socket(self) -> None:
        s = self._sock
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _complain(self, text: str) -> None:
        if text != self._last_complaint:
            log.warning("HA slave: %s", text)
            self._last_complaint = text

    # --- the loop ------------------------------------------------------------------------------
    def _run(self) -> None:
        pause = self.cfg.ha_reconnect_interval / 1000
        while not self._stop.is_set():
            addr = self.master_address
            outcome = WAIT
            if addr:
                try:
                    sock = socket.create_connection(split_address(addr), timeout=pause or 1.0)
                except (OSError, ValueError) as e:
                    self._complain(f"cannot connect to master {addr}: {e}")
                else:
                    outcome = self._connected(sock, addr)
            if outcome == WAIT and not self._stop.is_set():
                self._kick.wait(pause)
            self._kick.clear()

    def _connected(self, sock: socket.socket, addr: str) -> str:
        self._sock = sock
        self._frames.clear()
        try:
            sock.settimeout(max(self.cfg.ha_housekeeping_interval / 1000, 0.5))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return self._session(sock, addr)
        except HAProtocolError as e:
            log.error("HA slave: %s; closing the connection to %s", e, addr)
            self._check_pending = self.cfg.ha_rejoin_check_bytes > 0  # (the next connection compares first)
            return WAIT
        except StoreIOError as e:
            log.error("HA slave: cannot write what master %s sent: %s", addr, e)
            return WAIT
        except OSError as e:
            self._complain(f"connection to master {addr} lost: {e}")
            return WAIT
        finally:
            self.connected = False
            self._sock = None
            sock.close()

    def _session(self, sock: socket.socket, addr: str) -> str:
        cfg, cl = self.cfg, self.cl
        own = cl.confirm_offset
        check = None
        if self._check_pending and own > cl.min_offset:
            # (never 0: a report of 0 means "start at your last segment" to a master)
            check = Check(max(cl.min_offset, own - self._window, 1), own)
        reported = own if check is None else check.start
        sock.sendall(encode_report(reported))
        self.connected = True  # (reachable: the master took the report; it may send nothing for a while)
        last_write = last_rx = time.monotonic()
        got_frame = False
        log.info("HA slave connected to master %s, reported offset %d%s", addr, reported,
                 "" if check is None else f" (checking [{check.start}, {own}) against the master's bytes)")
        heartbeat, housekeeping = cfg.ha_send_heartbeat_interval / 1000, cfg.ha_housekeeping_interval / 1000
        while not self._stop.is_set():
            ready, _, _ = select.select([sock], [], [], min(0.1, heartbeat))
            now = time.monotonic()
            if ready:
                n = sock.recv_into(self._frames.space())
                if n == 0:
                    if check is not None and not got_frame:
                        return self._grow_window(check, "the master closed the connection before sending anything",
                                                 nothing_sent=True)
                    if not self._stop.is_set():
                        self._complain(f"master {addr} closed the connection")
                    if not got_frame:  # (refused at once, e.g. the slave is past the master's end)
                        self._check_pending = cfg.ha_rejoin_check_bytes > 0
                    return WAIT
                self._frames.received(n)
                self.last_read = last_rx = now
                self._last_complaint = ""
                while (frame := self._frames.next_frame()) is not None:
                    got_frame = True
                    if check is None:
                        append_replicated(cl, *frame)
                        continue
                    outcome = self._compare(check, *frame)
                    if outcome is not None:
                        return outcome
                    if check.cursor >= check.end:
                        check = None
                        self._check_pending = False
                        self._window = cfg.ha_rejoin_check_bytes
                if cl.confirm_offset > reported:
                    self._after_appends()
            elif now - last_rx > housekeeping:
                log.warning("HA slave: nothing from master %s for %.1fs (haHousekeepingInterval): reconnecting",
                            addr, housekeeping)
                return AGAIN
            cur = cl.confirm_offset if check is None else reported
            if cur > reported or now - last_write >= heartbeat:
                reported = cur
                sock.sendall(encode_report(reported))
                last_write = now
        return WAIT

    def _after_appends(self) -> None:
        """Wake the dispatcher (a broker dispatching inline set no ``on_append``), and give the
        commitlog a store time for the checkpoint's physic time: that of a dispatched record (below
        the end, so flushed with it), else a crash recovery would have to scan from the first segment."""
        store = self.service.store
        store.reput.wake()
        ts = store.checkpoint.values.logics_msg_timestamp
        if ts > self.cl.last_store_timestamp:
            self.cl.last_store_timestamp = ts

    # --- the rejoin check ----------------------------------------------------------------------
    def _compare(self, check: Check, phy: int, body) -> str | None:
        """Compare one frame with the own bytes; append what lies past them. None: go on."""
        if phy != check.cursor:
            raise HAProtocolError(f"master pushed offset {phy} while the slave compares from {check.cursor}",
                                  offset=phy)
        n = len(body)
        if n == 0:  # a heartbeat: the master has nothing past the cursor
            if check.cursor == check.start:
                return self._grow_window(check, f"the master has nothing past {check.start}", nothing_sent=True)
            return self._diverged(check, check.cursor)
        k = min(n, check.end - check.cursor)
        mf = self.cl.queue.find(check.cursor)
        pos = check.cursor - mf.file_from_offset
        mine = np.frombuffer(mf.mm, dtype=np.uint8, count=k, offset=pos)
        theirs = np.frombuffer(body, dtype=np.uint8, count=k)
        diff = np.flatnonzero(mine != theirs)
        if diff.size:
            return self._diverged(check, check.cursor + int(diff[0]))
        check.cursor += k
        if k < n:
            append_replicated(self.cl, check.cursor, body[k:])
        return None

    def _diverged(self, check: Check, at: int) -> str:
        if complete_records_end(self.cl, at) <= check.start:  # no whole record of the window matched
            return self._grow_window(check, f"the slave's bytes at {at} differ from the master's")
        cut_tail(self.service.store, at, f"rejoin: the master's commitlog differs from here (the slave held "
                                         f"{check.end - at} bytes the master never had)")
        self._check_pending = False
        self._window = self.cfg.ha_rejoin_check_bytes
        return AGAIN

    def _grow_window(self, check: Check, why: str, nothing_sent: bool = False) -> str:
        if check.start <= max(self.cl.min_offset, 1):
            if nothing_sent:  # the master holds none of the window (or kept less): replicate as upstream does
                log.warning("HA slave: %s, whatever the window: no rejoin check on this connection; replicating "
                            "from the slave's end", why)
                self._check_pending = False
                return AGAIN
            log.error("HA slave: %s, and the commitlog differs from its master's from its first byte on: not "
                      "cutting anything (is this the right master?)", why)
            return WAIT
        self._window *= 2
        log.warning("HA slave: %s: comparing a larger window (%d bytes) with the master", why, self._window)
        return AGAIN
