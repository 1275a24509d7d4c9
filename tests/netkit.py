"""A loopback TCP proxy that misbehaves on request, for replication and remoting tests.

``TcpProxy(("127.0.0.1", port))`` listens on 127.0.0.1 (``.address``) and forwards every
connection to the target. Between the two it can:

* ``cut_after(n)``: close both sides once ``n`` more bytes went downstream (target -> client),
  so the client sees a frame cut in the middle;
* ``stall()`` / ``resume()``: hold everything (both directions) without closing;
* ``delay = s``: hold each chunk ``s`` seconds before forwarding it;
* ``chunk = k``: forward downstream bytes ``k`` at a time (frames split across reads);
* ``drop_all()``: close every open connection now; ``refuse = True``: close new ones at once.

Threads only, bounded buffers (one chunk per direction), loopback only; ``close()`` stops it all."""
from __future__ import annotations

import select
import socket
import threading
import time


class TcpProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.address = self.sock.getsockname()[:2]
        self.delay = 0.0
        self.chunk = 65536
        self.refuse = False
        self.connections = 0          #: connections accepted so far
        self.downstream_bytes = 0     #: bytes forwarded target -> client so far
        self._cut_left: int | None = None
        self._running = threading.Event()
        self._running.set()
        self._stop = threading.Event()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def addr(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    # --- faults --------------------------------------------------------------------------------
    def cut_after(self, n: int) -> None:
        with self._lock:
            self._cut_left = n

    def stall(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def drop_all(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self._stop.set()
        self._running.set()
        self.drop_all()
        self.sock.close()
        for t in self._threads:
            t.join(5)

    # --- the pumps -----------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            if self.refuse:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:
                client.close()
                continue
            self.connections += 1
            with self._lock:
                self._pairs.append((client, upstream))
            for src, dst, down in ((client, upstream, False), (upstream, client, True)):
                t = threading.Thread(target=self._pump, args=(src, dst, down), daemon=True)
                self._threads.append(t)
                t.start()

    def _pump(self, src: socket.socket, dst: socket.socket, down: bool) -> None:
        try:
            while not self._stop.is_set():
                r, _, _ = select.select([src], [], [], 0.05)
                if not r:
                    continue
                data = src.recv(self.chunk if down else 65536)
                if not data:
                    break
                while not self._running.wait(0.05):
                    if self._stop.is_set():
                        return
                if self.delay:
                    time.sleep(self.delay)
                if down and not self._forward_down(dst, data):
                    break
                if not down:
                    dst.sendall(data)
        except (OSError, ValueError):  # (ValueError: the other pump closed this pair meanwhile)
            pass
        self._close_pair(src)

    def _forward_down(self, dst: socket.socket, data: bytes) -> bool:
        with self._lock:
            left = self._cut_left
            if left is not None:
                data = data[:left]
                self._cut_left = left - len(data)
        if data:
            dst.sendall(data)
            self.downstream_bytes += len(data)
        if left is not None and self._cut_left == 0:
            with self._lock:
                self._cut_left = None
            return False
        return True

    def _close_pair(self, s: socket.socket) -> None:
        with self._lock:
            pairs = [p for p in self._pairs if s in p]
            self._pairs = [p for p in self._pairs if s not in p]
        for a, b in pairs:
            for x in (a, b):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                x.close()
