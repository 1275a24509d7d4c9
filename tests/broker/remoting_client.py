"""A small remoting client for the broker tests: frames a request, reads the answer (blocking)."""
from __future__ import annotations

import itertools
import json
import socket

from rmqstore.broker import remoting as R


class RemotingClient:
    def __init__(self, address: str, timeout: float = 10.0):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._opaque = itertools.count(1)
        self.reader = R.FrameReader()
        self.pending: list[R.RemotingCommand] = []

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RemotingClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, code: int, ext: dict | None = None, body: bytes = b"", *, oneway: bool = False,
             serialize: int = R.JSON, version: int = R.VERSION_V4_9_4) -> int:
        cmd = R.request(code, ext, body, opaque=next(self._opaque), oneway=oneway, serialize=serialize)
        cmd.version = version
        self.sock.sendall(R.encode(cmd))
        return cmd.opaque

    def read(self) -> R.RemotingCommand:
        """The next command from the server (responses and the server's own requests)."""
        if self.pending:
            return self.pending.pop(0)
        while True:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("server closed the connection")
            frames = self.reader.feed(data)
            if frames:
                cmds = [R.decode(f) for f in frames]
                self.pending.extend(cmds[1:])
                return cmds[0]

    def response_to(self, opaque: int) -> R.RemotingCommand:
        skipped = []
        while True:
            cmd = self.read()
            if cmd.is_response and cmd.opaque == opaque:
                self.pending[:0] = skipped
                return cmd
            skipped.append(cmd)

    def call(self, code: int, ext: dict | None = None, body: bytes = b"", **kw) -> R.RemotingCommand:
        return self.response_to(self.send(code, ext, body, **kw))

    def json_call(self, code: int, ext: dict | None = None, doc=None, **kw):
        body = json.dumps(doc).encode() if doc is not None else b""
        r = self.call(code, ext, body, **kw)
        return r, (json.loads(r.body) if r.body else None)
