"""The broker's own requests to other servers (``BrokerOuterAPI`` upstream): registering with every
name server, unregistering at shutdown, and the slave's requests to its master.

:class:`RemotingClient` is an asyncio remoting client: one connection per address, kept open and
reused, requests matched to answers by opaque, a failed connection dropped (the next request dials
again). The name server ties a registration to the connection it came on, as upstream's does: when
the broker's connection closes, the name server unregisters it at once.
"""
from __future__ import annotations

import asyncio
import itertools
import logging

from ..engine.consumer_offsets import parse_broker_json
from . import remoting as R

log = logging.getLogger("rmqstore.broker")

#: ``registerBrokerAll``'s timeout (``registerBrokerTimeoutMills``) and the slave's request timeout
REGISTER_TIMEOUT_S = 24.0
REQUEST_TIMEOUT_S = 3.0


def split_addresses(namesrv_addr: str | None) -> list[str]:
    """``a:9876;b:9876`` (``namesrvAddr``) as a list; blanks dropped, order kept, duplicates once."""
    out: list[str] = []
    for part in (namesrv_addr or "").replace(",", ";").split(";"):
        part = part.strip()
        if part and part not in out:
            host, sep, port = part.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"name server address {part!r} is not HOST:PORT")
            out.append(part)
    return out


class _Connection(asyncio.Protocol):
    def __init__(self, client: "RemotingClient", addr: str):
        self.client = client
        self.addr = addr
        self.reader = R.FrameReader()
        self.transport: asyncio.Transport | None = None
        self.pending: dict[int, asyncio.Future] = {}
        self.closed = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.reader.feed(data)
            for f in frames:
                cmd = R.decode(f)
                fut = self.pending.pop(cmd.opaque, None) if cmd.is_response else None
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
        except R.FrameError as e:
            log.warning("closing the connection to %s: %s", self.addr, e)
            self.transport.close()

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.client._forget(self)
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError(f"connection to {self.addr} closed"))
        self.pending.clear()


class RemotingClient:
    def __init__(self) -> None:
        self._conns: dict[str, _Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._opaque = itertools.count(1)

    async def _connect(self, addr: str, timeout: float) -> _Connection:
        lock = self._locks.setdefault(addr, asyncio.Lock())
        async with lock:  # one connection per address, even for requests sent together
            conn = self._conns.get(addr)
            if conn is not None and not conn.closed:
                return conn
            host, _, port = addr.rpartition(":")
            loop = asyncio.get_running_loop()
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(self, addr), host.strip("[]"), int(port)), timeout)
            self._conns[addr] = conn
            return conn

    def _forget(self, conn: _Connection) -> None:
        if self._conns.get(conn.addr) is conn:
            del self._conns[conn.addr]

    async def invoke(self, addr: str, code: int, ext: dict | None = None, body: bytes = b"", *,
                     timeout: float = REQUEST_TIMEOUT_S, oneway: bool = False) -> R.RemotingCommand | None:
        """Send a request and wait for its answer (``ConnectionError``/``TimeoutError`` on failure)."""
        conn = await self._connect(addr, timeout)
        cmd = R.request(code, ext, body, opaque=next(self._opaque), oneway=oneway)
        if oneway:
            conn.transport.write(R.encode(cmd))
            return None
        fut = asyncio.get_running_loop().create_future()
        conn.pending[cmd.opaque] = fut
        conn.transport.write(R.encode(cmd))
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            conn.pending.pop(cmd.opaque, None)
            raise TimeoutError(f"no answer from {addr} to request code {code} within {timeout:.1f} s") from None

    def close(self) -> None:
        for conn in list(self._conns.values()):
            if conn.transport is not None:
                conn.transport.close()
        self._conns.clear()


class BrokerOuterAPI:
    """Registration with every name server (in parallel) and unregistration."""

    def __init__(self, namesrv_addrs: list[str], client: RemotingClient | None = None):
        self.namesrv_addrs = list(namesrv_addrs)
        self.client = client or RemotingClient()

    async def register_all(self, ext: dict, body: bytes, timeout: float = REGISTER_TIMEOUT_S
                           ) -> list[tuple[str, R.RemotingCommand | BaseException]]:
        """REGISTER_BROKER to every name server; each one's answer or error."""
        async def one(addr: str):
            try:
                return addr, await self.client.invoke(addr, 103, ext, body, timeout=timeout)
            except (OSError, TimeoutError, ConnectionError) as e:
                return addr, e

        results = await asyncio.gather(*(one(a) for a in self.namesrv_addrs))
        for addr, r in results:
            if isinstance(r, BaseException):
                log.warning("registering with the name server %s failed: %s", addr, r)
            elif r.code != R.ResponseCode.SUCCESS:
                log.warning("the name server %s refused the registration: code %d %s", addr, r.code, r.remark)
        return results

    async def unregister_all(self, ext: dict, timeout: float = REQUEST_TIMEOUT_S) -> None:
        async def one(addr: str) -> None:
            try:
                r = await self.client.invoke(addr, 104, ext, timeout=timeout)
                log.info("unregistered from the name server %s (code %d)", addr, r.code)
            except (OSError, TimeoutError, ConnectionError) as e:
                log.warning("unregistering from the name server %s failed: %s", addr, e)

        await asyncio.gather(*(one(a) for a in self.namesrv_addrs))

    async def topic_route(self, topic: str, timeout: float = REQUEST_TIMEOUT_S) -> dict | None:
        """GET_ROUTEINFO_BY_TOPIC from the name servers in turn: the first route answered, None when
        one says the topic does not exist (TOPIC_NOT_EXIST) or none answers."""
        for addr in self.namesrv_addrs:
            try:
                r = await self.client.invoke(addr, R.RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic},
                                             timeout=timeout)
            except (OSError, TimeoutError, ConnectionError) as e:
                log.warning("asking the name server %s for the route of %s failed: %s", addr, topic, e)
                continue
            if r.code == R.ResponseCode.SUCCESS and r.body:
                try:
                    return parse_broker_json(r.body.decode("utf-8"))
                except ValueError as e:
                    log.warning("the name server %s answered a route of %s that does not parse: %s", addr, topic, e)
                    continue
            if r.code == R.ResponseCode.TOPIC_NOT_EXIST:
                return None
        return None

    def close(self) -> None:
        self.client.close()
