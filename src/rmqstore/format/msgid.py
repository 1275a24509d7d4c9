"""Message ids (FORMAT.md §3).

offsetMsgId (server id), upper-case hex of::

    +------------------+-----------+---------------------+
    | store host addr  | port i32  | phy offset i64      |   16 bytes (IPv4) / 28 bytes (IPv6)
    | 4 or 16 bytes    |           |                     |
    +------------------+-----------+---------------------+

UNIQ_KEY (client id, ``MessageClientIDSetter``), upper-case hex of::

    ip(4|16) | pid u16 | class-loader hash i32 | ms since start of month i32 | counter u16
"""
from __future__ import annotations

import functools
import ipaddress
import itertools
import os
import random
import struct
import threading
import time

import numpy as np

from ..errors import MessageIdError
from .javalang import parse_port

_PORT_OFF = struct.Struct(">iq")


@functools.lru_cache(maxsize=4096)
def parse_host(host: str) -> bytes:
    """``"ip:port"`` / ``"[v6]:port"`` to the on-disk form: address bytes + i32 port."""
    h, sep, port = host.rpartition(":")
    if not sep:
        raise ValueError(f"host {host!r} is not 'ip:port'")
    bracketed = h.startswith("[") and h.endswith("]")
    addr = ipaddress.ip_address(h[1:-1] if bracketed else h)
    if addr.version == 6 and not bracketed:
        raise ValueError(f"host {host!r}: an IPv6 address is written [addr]:port")
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped  # RocketMQ never writes an IPv4-mapped address as V6: Java's InetAddress is IPv4
    return addr.packed + struct.pack(">i", parse_port(port))


@functools.lru_cache(maxsize=4096)
def format_host(raw: bytes) -> str:
    """On-disk host (8 or 20 bytes) to ``"ip:port"`` / ``"[v6]:port"``."""
    port = struct.unpack_from(">i", raw, len(raw) - 4)[0]
    addr = ipaddress.ip_address(bytes(raw[:-4]))
    return f"[{addr}]:{port}" if addr.version == 6 else f"{addr}:{port}"


def _host_text(addr: bytes, port: int) -> str:
    return f"{addr[0]}.{addr[1]}.{addr[2]}.{addr[3]}:{port}"


def _id_prefix(addr: bytes, port: int) -> str:
    return f"{addr.hex().upper()}{port & 0xFFFFFFFF:08X}"


def _per_host(make):
    """``make(addr, port)`` cached per host (a store has few): bounded, cleared when it grows past 65,536."""
    table: dict = {}

    def get(addr: bytes, port: int) -> str:
        s = table.get((addr, port))
        if s is None:
            if len(table) > 65536:
                table.clear()
            s = table[(addr, port)] = make(addr, port)
        return s
    return get


#: ``"a.b.c.d:port"`` for a 4-byte address and a port
format_host4 = _per_host(_host_text)
_id_prefix4 = _per_host(_id_prefix)


def offset_msg_id4(addr: bytes, port: int, phy_offset: int) -> str:
    """:func:`encode_offset_msg_id` for an IPv4 store host given as address bytes and port (the
    store-host half cached per host)."""
    return f"{_id_prefix4(addr, port)}{phy_offset & 0xFFFFFFFFFFFFFFFF:016X}"


def encode_offset_msg_id(store_host_raw: bytes, phy_offset: int) -> str:
    """offsetMsgId from the raw STOREHOST field (addr + port) and the phy offset."""
    return (bytes(store_host_raw) + phy_offset.to_bytes(8, "big", signed=True)).hex().upper()


#: batches up to this many records are packed with one cached ``struct`` (:func:`_ids_of`)
IDS_PACKED = 1024


@functools.lru_cache(maxsize=64)
def _ids_of(host_len: int, n: int) -> struct.Struct:
    """``n`` pairs (raw store host, phy offset) packed back to back."""
    return struct.Struct(">" + f"{host_len}sq" * n)


def encode_offset_msg_ids(store_host_raw: bytes, phy_offsets) -> str:
    """:func:`encode_offset_msg_id` for many records of one store host, joined with ``,`` (the
    ``msgId`` of a batch put); one ``struct`` pack (a numpy fill past ``IDS_PACKED`` records) and
    one ``bytes.hex`` call."""
    n = len(phy_offsets)
    if 0 < n <= IDS_PACKED:
        host = bytes(store_host_raw)
        flat = [host] * (2 * n)
        flat[1::2] = phy_offsets.tolist() if isinstance(phy_offsets, np.ndarray) else phy_offsets
        return _ids_of(len(host), n).pack(*flat).hex(",", len(host) + 8).upper()
    offs = np.asarray(phy_offsets, dtype=">i8")
    n, width = offs.size, len(store_host_raw) + 8
    if n == 0:
        return ""
    raw = np.empty((n, width), dtype=np.uint8)
    raw[:, :width - 8] = np.frombuffer(bytes(store_host_raw), dtype=np.uint8)
    raw[:, width - 8:] = offs.view(np.uint8).reshape(n, 8)
    return raw.tobytes().hex(",", width).upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """``(store_host, phy_offset)`` from an offsetMsgId (32 hex chars IPv4, 56 IPv6);
    :class:`MessageIdError` (a ``ValueError``) for anything else."""
    if not isinstance(msg_id, str):
        raise TypeError(f"offsetMsgId must be a str, got {type(msg_id).__name__}")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError as e:
        raise MessageIdError(f"offsetMsgId {msg_id!r} is not hex (expected 32 or 56 hex digits)") from e
    if len(raw) not in (16, 28) or len(msg_id) != 2 * len(raw):
        raise MessageIdError(f"offsetMsgId {msg_id!r}: expected 32 (IPv4) or 56 (IPv6) hex digits, got {len(msg_id)}")
    alen = len(raw) - 12
    port, phy = _PORT_OFF.unpack_from(raw, alen)
    return format_host(raw[:alen] + struct.pack(">i", port)), phy


def _month_start_ms(now_ms: int, months_back: int = 0) -> int:
    """Start of the (current − months_back) month in local time, epoch ms."""
    t = time.localtime(now_ms / 1000)
    y, m = t.tm_year, t.tm_mon - months_back
    while m < 1:
        m += 12
        y -= 1
    return int(time.mktime((y, m, 1, 0, 0, 0, 0, 0, -1)) * 1000)


class UniqKeyGenerator:
    """Thread-safe UNIQ_KEY generator with a fixed ip/pid/loader prefix."""

    def __init__(self, ip: str = "127.0.0.1"):
        addr = ipaddress.ip_address(ip)
        self._prefix = (addr.packed + struct.pack(">H", os.getpid() & 0xFFFF)
                        + struct.pack(">i", random.getrandbits(31))).hex().upper()
        self._counter = itertools.count(random.getrandbits(16))
        self._lock = threading.Lock()
        self._month_start = 0
        self._next_month = 0

    def new(self, now_ms: int | None = None) -> str:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        if not (self._month_start <= now < self._next_month):
            with self._lock:
                self._month_start = _month_start_ms(now)
                self._next_month = _month_start_ms(self._month_start + 32 * 86_400_000)
        span = (now - self._month_start) & 0xFFFFFFFF
        return f"{self._prefix}{span:08X}{next(self._counter) & 0xFFFF:04X}"


def uniq_key_timestamp(uniq_key: str, now_ms: int | None = None) -> int:
    """Creation time (epoch ms) encoded in a UNIQ_KEY, resolved against ``now_ms`` as upstream."""
    try:
        raw = bytes.fromhex(uniq_key)
    except ValueError as e:
        raise MessageIdError(f"UNIQ_KEY {uniq_key!r} is not hex") from e
    if len(raw) < 12:
        raise MessageIdError(f"UNIQ_KEY {uniq_key!r} is too short")
    span = struct.unpack_from(">I", raw, len(raw) - 6)[0]
    now = int(time.time() * 1000) if now_ms is None else now_ms
    start = _month_start_ms(now)
    if start + span >= now:
        start = _month_start_ms(now, 1)
    return start + span


def uniq_key_pid(uniq_key: str) -> int:
    raw = bytes.fromhex(uniq_key)
    return struct.unpack_from(">H", raw, len(raw) - 12)[0]
