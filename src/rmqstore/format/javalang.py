"""Java's parsing, where RocketMQ's reader is the judge of what rmqstore writes.

Python's ``int()`` is laxer than Java's ``Integer.parseInt``: it takes surrounding white space
(``' 3'``), underscores (``'3_0'``) and values past 32 bits, all of which Java rejects with a
``NumberFormatException``. A DELAY property that RocketMQ's recovery cannot parse makes it treat
the record as invalid and truncate the store there, so the write path parses as Java does.
"""
from __future__ import annotations

import functools
import unicodedata

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1


def parse_int(text: str) -> int:
    """``Integer.parseInt(text)``: an optional ``+``/``-`` then one or more decimal digits (any
    Unicode decimal digit, as ``Character.digit`` accepts), nothing else, within int32;
    ``ValueError`` otherwise."""
    if type(text) is str and text.isascii() and text.isdigit() and len(text) < 10:
        return int(text)  # the usual case: plain ASCII digits that fit
    return _parse_java_integer(text, 32, "Integer.parseInt")


def parse_long(text: str) -> int:
    """``Long.parseLong(text)``: as :func:`parse_int`, within int64."""
    if type(text) is str and text.isascii() and text.isdigit() and len(text) < 19:
        return int(text)
    return _parse_java_integer(text, 64, "Long.parseLong")


def _parse_java_integer(text: str, bits: int, java: str) -> int:
    what = "an int" if bits == 32 else "a long"
    if not isinstance(text, str) or not text:
        raise ValueError(f"{text!r} is not {what} ({java}: empty)")
    sign, digits = (text[0], text[1:]) if text[0] in "+-" else ("+", text)
    if not digits:
        raise ValueError(f"{text!r} is not {what} ({java}: a sign alone)")
    value = 0
    for ch in digits:
        d = unicodedata.decimal(ch, None)
        if d is None:
            raise ValueError(f"{text!r} is not {what} ({java}: {ch!r} is not a digit)")
        value = value * 10 + d
    value = -value if sign == "-" else value
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise ValueError(f"{text!r} is not {what} ({java}: outside {bits} bits)")
    return value


def hashmap_order(keys: list[str], initial_capacity: int = 16) -> list[str]:
    """The iteration order of a ``java.util.HashMap`` built by putting ``keys`` (distinct) in this
    order into ``new HashMap<>(initial_capacity)``: by bucket (the spread String hash masked by the
    table size after its resizes), then insertion order within a bucket (a resize splits buckets
    keeping their order). RocketMQ's broker re-serializes message properties from such a map, so
    this order is the order a Java broker stores them in. (Buckets of 8+ keys become trees upstream;
    message properties never get near that.)"""
    return list(_hashmap_order(tuple(keys), initial_capacity))


@functools.lru_cache(maxsize=4096)
def _hashmap_order(keys: tuple[str, ...], initial_capacity: int) -> tuple[str, ...]:
    """:func:`hashmap_order`, memoised: a producer sends the same property names again and again."""
    from .hashes import java_hash_cached as java_hash
    cap = 1
    while cap < initial_capacity:
        cap <<= 1
    while len(keys) > cap * 3 // 4:
        cap <<= 1

    def bucket(k: str) -> int:
        h = java_hash(k) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (cap - 1)

    return tuple(sorted(keys, key=bucket))


def parse_port(text: str) -> int:
    """A port as RocketMQ writes one: ASCII digits only, 0-65535."""
    if not (text.isascii() and text.isdigit()) or int(text) > 65535:
        raise ValueError(f"port {text!r} is not a number from 0 to 65535")
    return int(text)


def java_trim(s: str) -> str:
    """Java's ``String.trim``: strips every char up to U+0020 at both ends (Python's ``strip``
    also strips Unicode spaces such as U+00A0 or U+3000, which Java keeps)."""
    i, j = 0, len(s)
    while i < j and s[i] <= " ":
        i += 1
    while j > i and s[j - 1] <= " ":
        j -= 1
    return s[i:j]
