"""The master's side of the classic HA protocol (``DefaultHAConnection``): an acceptor on the HA
port and, per slave, a reader of its 8-byte reports and a writer of 12-byte headers with at most
``haTransferBatchSize`` bytes of one segment (sent by ``sendfile`` straight from the segment file).

Beyond upstream: a report past the master's end, a negative report or one lower than the
slave's last (none of which a slave sends) closes the connection with one log line, as 4.9.8 did
for the first kind; new data wakes the writers at once (upstream waits up to 100 ms)."""
from __future__ import annotations

import logging
import select
import socket
import threading
import time

from ...errors import HAProtocolError
from .protocol import ReportReader, encode_header, start_offset

log = logging.getLogger("rmqstore.ha")
_SLAVE_CLOSED = "the slave closed the connection"


class Acceptor:
    """Listens on ``(host, port)``; hands each connection to ``on_connect(sock, peer)``."""

    def __init__(self, host: str, port: int, on_connect) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host.strip("[]"), port), family=family)
        self.sock.settimeout(0.2)
        self.address = self.sock.getsockname()[:2]
        self._on_connect = on_connect
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rmqstore-ha-accept-{self.address[1]}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                if not self._stop.is_set():
                    log.exception("HA acceptor on %s failed", self.address)
                return
            self._on_connect(conn, f"{peer[0]}:{peer[1]}")

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        self._thread.join(5)


class SlaveConnection:
    """One slave: the reader thread takes its reports, the writer thread sends it the commitlog."""

    def __init__(self, service, sock: socket.socket, peer: str) -> None:
        self.service = service
        self.sock = sock
        self.peer = peer
        self.request_offset = -1      #: the first report (where the transfer started from)
        self.ack_offset = -1          #: the last report
        self.last_report = time.monotonic()
        self.closed = threading.Event()
        self._file = None             # (segment path, open file) the writer sends from
        # (writes wait for a stalled slave up to haHousekeepingInterval; reads poll, see _read_loop)
        sock.settimeout(max(service.cfg.ha_housekeeping_interval / 1000, 0.5))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._reader = threading.Thread(target=self._read_loop, name=f"rmqstore-ha-read-{peer}", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name=f"rmqstore-ha-write-{peer}", daemon=True)

    def start(self) -> None:
        self._reader.start()
        self._writer.start()

    def close(self, why: str | None = None) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        if why:
            level = logging.INFO if why == _SLAVE_CLOSED else logging.WARNING
            log.log(level, "HA connection from slave %s closed: %s", self.peer, why)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.service.connection_closed(self)

    def join(self, timeout: float) -> None:
        for t in (self._reader, self._writer):
            if t is not threading.current_thread() and t.ident is not None:
                t.join(timeout)

    # --- reports -------------------------------------------------------------------------------
    def _read_loop(self) -> None:
        reports = ReportReader()
        housekeeping = self.service.cfg.ha_housekeeping_interval / 1000
        last_read = time.monotonic()
        why = None
        while not self.closed.is_set():
            try:
                ready, _, _ = select.select([self.sock], [], [], 0.2)
                if not ready:
                    if time.monotonic() - last_read > housekeeping:
                        why = f"no report for {housekeeping:.1f}s (haHousekeepingInterval)"
                        break
                    continue
                data = self.sock.recv(65536)
            except (OSError, ValueError) as e:
                why = None if self.closed.is_set() else f"read failed: {e}"
                break
            if not data:
                why = _SLAVE_CLOSED
                break
            last_read = time.monotonic()
            try:
                for value in reports.feed(data):
                    self._on_report(value)
            except HAProtocolError as e:
                why = str(e)
                break
        self.close(why)

    def _on_report(self, value: int) -> None:
        master_max = self.service.store.commit_log.confirm_offset
        if value < 0:
            raise HAProtocolError(f"slave {self.peer} reported offset {value}: negative")
        if self.request_offset >= 0 and value < self.ack_offset:
            raise HAProtocolError(f"slave {self.peer} reported offset {value} after {self.ack_offset}: offsets "
                                  "never go back on one connection")
        if value > master_max:
            raise HAProtocolError(f"slave {self.peer} reported offset {value}, past the master's max offset "
                                  f"{master_max}")
        if self.request_offset < 0:
            self.request_offset = value
            log.info("slave %s request offset %d", self.peer, value)
        self.ack_offset = value
        self.last_report = time.monotonic()
        self.service.on_ack(value)

    # --- transfer ------------------------------------------------------------------------------
    def _write_loop(self) -> None:
        try:
            self._transfer()
        except (OSError, ValueError) as e:  # (ValueError: sendfile on a socket closed meanwhile)
            if not self.closed.is_set():
                self.close(f"write failed: {e}")
        except HAProtocolError as e:
            self.close(str(e))
        finally:
            if self._file is not None:
                self._file[1].close()
        self.close()

    def _transfer(self) -> None:
        svc = self.service
        cfg, cl = svc.cfg, svc.store.commit_log
        while self.request_offset < 0:
            if self.closed.wait(0.01):
                return
        nxt = start_offset(self.request_offset, cl.confirm_offset, cfg.mapped_file_size_commit_log)
        log.info("master transfers from %d to slave %s (it requested %d)", nxt, self.peer, self.request_offset)
        heartbeat = cfg.ha_send_heartbeat_interval / 1000
        last_write = time.monotonic()
        while not self.closed.is_set():
            seq = svc.append_seq
            sent = self._send_some(cl, nxt, cfg.ha_transfer_batch_size)
            if sent:
                nxt += sent
                last_write = time.monotonic()
                continue
            idle = time.monotonic() - last_write
            if idle >= heartbeat:
                self.sock.sendall(encode_header(nxt, 0))
                last_write = time.monotonic()
                continue
            svc.wait_append(seq, min(heartbeat - idle, 0.1))

    def _send_some(self, cl, nxt: int, batch: int) -> int:
        """One frame from ``nxt`` (the rest of its segment, at most ``batch`` bytes); 0 when none."""
        end = cl.confirm_offset
        if nxt >= end:
            return 0
        mf = cl.queue.find(nxt)
        if mf is None:
            raise HAProtocolError(f"offset {nxt} is in no commitlog segment of the master (min offset "
                                  f"{cl.min_offset}): the slave is behind what retention kept")
        base = mf.file_from_offset
        pos = nxt - base
        size = min(batch, min(mf.wrote_position, end - base) - pos)
        if size <= 0:
            return 0
        self.sock.sendall(encode_header(nxt, size))
        fh = self._segment_file(mf.path)
        sent = self.sock.sendfile(fh, pos, size)
        if sent != size:
            raise OSError(f"sendfile sent {sent} of {size} bytes")
        return size

    def _segment_file(self, path: str):
        if self._file is None or self._file[0] != path:
            if self._file is not None:
                self._file[1].close()
            self._file = (path, open(path, "rb", buffering=0))
        return self._file[1]

