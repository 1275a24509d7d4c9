"""The remoting server: one asyncio protocol per connection, frames in, responses out.

Every request is handled as it arrives; a handler that must wait (a held pull, a send waiting for
the disk) returns an awaitable and the connection goes on reading, so a long-polled pull never blocks
the connection's other requests. Buffers are bounded: a frame is at most ``MAX_FRAME`` bytes (a larger
length closes the connection, as upstream's frame decoder does), a connection with more than
``MAX_IN_FLIGHT`` unanswered requests, or whose peer does not read its responses (the transport's
write buffer above its high-water mark), is not read from until that drains.
"""
from __future__ import annotations

import asyncio
import collections
import inspect
import itertools
import logging
from typing import Awaitable, Callable

from . import remoting as R

log = logging.getLogger("rmqstore.broker")

MAX_IN_FLIGHT = 256
WRITE_HIGH_WATER = 4 * 1024 * 1024

Handler = Callable[["Connection", R.RemotingCommand], "R.RemotingCommand | bytes | None | Awaitable"]


def parse_listen(listen: str) -> tuple[str, int]:
    """``(host, port)`` of a ``HOST:PORT`` listen address (``[v6]:port`` too; an empty host is 0.0.0.0)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"listen address {listen!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


class Connection(asyncio.Protocol):
    """One client connection."""

    _ids = itertools.count(1)

    def __init__(self, server: "RemotingServer"):
        self.server = server
        self.id = next(self._ids)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.reader = R.FrameReader(server.max_frame)
        self.in_flight = 0
        self._paused_for: set[str] = set()
        self._backlog: collections.deque[bytes] = collections.deque()
        self.closed = False
        self.client_id: str | None = None
        self.language = "JAVA"
        self.version = 0
        self._opaque = itertools.count(1 << 30)

    # --- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        peer = transport.get_extra_info("peername")
        self.peer = format_address(peer) if peer else "?"
        self.server.connections.add(self)
        log.info("client connected: %s", self.peer)

    def connection_lost(self, exc) -> None:
        self.closed = True
        while self._backlog:  # frames that arrived before the close are still handled (ali-ons sends its
            try:              # last offsets oneway right before it disconnects); answers go nowhere
                self.server.handle(self, R.decode(self._backlog.popleft()))
            except R.FrameError:
                break
        self.server.connections.discard(self)
        log.info("client disconnected: %s%s", self.peer, f" ({exc})" if exc else "")
        self.server.on_disconnect(self)

    def data_received(self, data: bytes) -> None:
        try:
            self._backlog.extend(self.reader.feed(data))
        except R.FrameError as e:
            log.warning("closing %s: %s", self.peer, e)
            self.transport.close()
            return
        server = self.server
        server.reading = True
        try:
            self._process()
        finally:
            server.reading = False
            if server.after_read is not None:
                try:
                    server.after_read()
                except Exception:  # noqa: BLE001 - not this connection's fault: it stays open
                    log.exception("after a read from %s", self.peer)

    def _process(self) -> None:
        """Handle the frames received so far, stopping while the connection is paused (a peer that
        does not read its answers gets no more of them: at most one read's worth of frames waits)."""
        backlog = self._backlog
        while backlog and not self._paused_for and not self.closed:
            frame = backlog.popleft()
            try:
                cmd = R.decode(frame)
            except R.FrameError as e:
                log.warning("closing %s: undecodable frame: %s", self.peer, e)
                backlog.clear()
                self.transport.close()
                return
            self.server.handle(self, cmd)

    def pause_writing(self) -> None:
        self._pause("write")

    def resume_writing(self) -> None:
        self._resume("write")

    # --- flow control ----------------------------------------------------------------------------
    def _pause(self, why: str) -> None:
        if not self._paused_for and not self.closed:
            self.transport.pause_reading()
        self._paused_for.add(why)

    def _resume(self, why: str) -> None:
        self._paused_for.discard(why)
        if not self._paused_for and not self.closed:
            self.transport.resume_reading()
            self._process()

    def started(self) -> None:
        self.in_flight += 1
        if self.in_flight >= MAX_IN_FLIGHT:
            self._pause("in-flight")

    def finished(self) -> None:
        self.in_flight -= 1
        if self.in_flight < MAX_IN_FLIGHT // 2 and "in-flight" in self._paused_for:
            self._resume("in-flight")

    # --- output ----------------------------------------------------------------------------------
    def send(self, cmd: R.RemotingCommand) -> None:
        if not self.closed:
            self.transport.write(R.encode(cmd))

    def send_frame(self, frame: bytes) -> None:
        """A whole frame encoded already (length prefix included)."""
        if not self.closed:
            self.transport.write(frame)

    def send_request_oneway(self, code: int, ext: dict | None = None, body: bytes = b"") -> None:
        """A oneway request from the broker to this client (NOTIFY_CONSUMER_IDS_CHANGED, transaction
        checks)."""
        self.send(R.request(code, ext, body, opaque=next(self._opaque), oneway=True))


def format_address(peer) -> str:
    host, port = peer[0], peer[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Deferred:
    """An answer given later without a task or a thread: a handler returns it, the server says where
    the answer goes, and whoever computes it (the broker's group commit, on the event loop) calls
    :meth:`resolve` or :meth:`fail`. Awaitable as well, for callers that await (the gRPC front)."""

    __slots__ = ("_deliver", "_future", "_outcome")

    def __init__(self) -> None:
        self._deliver: Callable | None = None
        self._future: asyncio.Future | None = None
        self._outcome: tuple | None = None

    def deliver_to(self, fn: Callable[[object, BaseException | None], None]) -> None:
        """``fn(value, exception)`` gets the outcome (at once when it is already known)."""
        if self._outcome is not None:
            fn(*self._outcome)
        else:
            self._deliver = fn

    def resolve(self, value) -> None:
        self._settle(value, None)

    def fail(self, exc: BaseException) -> None:
        self._settle(None, exc)

    def _settle(self, value, exc) -> None:
        if self._outcome is not None:
            return
        self._outcome = (value, exc)
        if self._deliver is not None:
            self._deliver(value, exc)
        elif self._future is not None and not self._future.done():
            if exc is None:
                self._future.set_result(value)
            else:
                self._future.set_exception(exc)

    def __await__(self):
        if self._outcome is None and self._future is None:
            self._future = asyncio.get_running_loop().create_future()
        if self._outcome is not None:
            value, exc = self._outcome
            if exc is not None:
                raise exc
            return value
        return (yield from self._future.__await__())


class RemotingServer:
    """Accepts connections and routes each request to the handler registered for its code."""

    def __init__(self, handlers: dict[int, Handler], *, max_frame: int = R.MAX_FRAME,
                 on_disconnect: Callable[[Connection], None] | None = None):
        self.handlers = handlers
        self.max_frame = max_frame
        self.connections: set[Connection] = set()
        self._on_disconnect = on_disconnect
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self.requests = 0
        self.errors = 0
        #: a read's frames are being handled (``Connection.data_received``); ``after_read()`` runs
        #: once they are (the broker's group commit, when it chose to commit at the end of the read)
        self.reading = False
        self.after_read: Callable[[], None] | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: Connection(self), host, port, reuse_address=True,
                                                backlog=1024)
        sock = self._server.sockets[0].getsockname()
        return sock[0], sock[1]

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def drain(self, timeout: float) -> None:
        """Wait (up to ``timeout`` s) for the requests in flight to be answered."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)

    def close_all(self) -> None:
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()

    def on_disconnect(self, conn: Connection) -> None:
        if self._on_disconnect is not None:
            self._on_disconnect(conn)

    def handle(self, conn: Connection, cmd: R.RemotingCommand) -> None:
        if cmd.is_response:
            return  # the broker's own requests to clients are oneway: nothing waits for an answer
        self.requests += 1
        handler = self.handlers.get(cmd.code)
        if handler is None:
            self._reply(conn, cmd, cmd.response(R.ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                                f" request type {cmd.code} not supported"))
            return
        try:
            result = handler(conn, cmd)
        except R.HeaderError as e:
            result = cmd.response(R.ResponseCode.SYSTEM_ERROR, str(e))
        except Exception as e:  # noqa: BLE001 - one bad request must not stop the server
            self.errors += 1
            log.exception("request code %d from %s failed", cmd.code, conn.peer)
            result = cmd.response(R.ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
        if type(result) is Deferred:
            conn.started()
            result.deliver_to(lambda value, exc: self._finish_deferred(conn, cmd, value, exc))
        elif type(result) is R.RemotingCommand:
            self._reply(conn, cmd, result)
        elif inspect.isawaitable(result):
            conn.started()
            task = asyncio.ensure_future(result)
            self._tasks.add(task)
            task.add_done_callback(lambda t: self._finish(conn, cmd, t))
        elif result is not None:
            self._reply(conn, cmd, result)

    def _finish(self, conn: Connection, cmd: R.RemotingCommand, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            conn.finished()
            return
        exc = task.exception()
        self._finish_deferred(conn, cmd, None if exc is not None else task.result(), exc)

    def _finish_deferred(self, conn: Connection, cmd: R.RemotingCommand, result, exc: BaseException | None) -> None:
        conn.finished()
        if isinstance(exc, R.HeaderError):
            result = cmd.response(R.ResponseCode.SYSTEM_ERROR, str(exc))
        elif exc is not None:
            self.errors += 1
            log.error("request code %d from %s failed: %r", cmd.code, conn.peer, exc, exc_info=exc)
            result = cmd.response(R.ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if result is not None:
            self._reply(conn, cmd, result)

    @staticmethod
    def _reply(conn: Connection, cmd: R.RemotingCommand, response: "R.RemotingCommand | bytes") -> None:
        """Send ``response`` unless ``cmd`` was oneway: a command (given the request's opaque), or
        the bytes of a whole frame a handler encoded itself for this request
        (:func:`~.remoting.json_answer_frame`)."""
        if not cmd.is_oneway:
            if type(response) is bytes:
                conn.send_frame(response)
            else:
                response.opaque = cmd.opaque
                conn.send(response)
