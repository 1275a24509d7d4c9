"""Message properties string (FORMAT.md §2.4, §2.6).

Layout: ``name 0x01 value 0x02`` repeated; writers emit a trailing 0x02 after every entry and omit
entries whose value is ``None``. Parsing follows upstream ``string2messageProperties`` exactly: a
0x02-delimited segment is kept only when its first 0x01 has a non-empty name before it and a
non-empty value after it; later duplicates overwrite earlier ones. UTF-8 never encodes 0x01/0x02
inside a multi-byte sequence, so splitting the raw bytes is equivalent to splitting the decoded
string; values are decoded with U+FFFD for malformed bytes, as Java does.

Optional properties CRC (``enabledAppendPropCRC``): the writer reserves
``__CRC32# 0x01 DDDDDDDDDD 0x02`` (20 bytes) at the end of the properties and, once the record's
offsets are final, fills in ``crc32(record[:-20])`` as 10 decimal digits least-significant first.
"""
from __future__ import annotations

import functools
from typing import Iterable, Mapping, Sequence

NAME_VALUE_SEPARATOR = b"\x01"
PROPERTY_SEPARATOR = b"\x02"
MAX_PROPERTIES_SIZE = 32767

KEYS = "KEYS"
TAGS = "TAGS"
UNIQ_KEY = "UNIQ_KEY"
DELAY = "DELAY"
CRC32_KEY = "__CRC32#"
CRC32_RESERVED_LEN = 20  # len("__CRC32#") + 1 + 10 + 1
_CRC_PREFIX = b"__CRC32#\x01"
KEY_SEPARATOR = " "

PropertiesInput = Mapping[str, object] | Iterable[tuple[str, object]] | None


def encode_properties(props: PropertiesInput) -> bytes:
    """``name\x01value\x02`` for each entry in the given order; ``None`` values are omitted."""
    if not props:
        return b""
    items = props.items() if hasattr(props, "items") else props
    return "".join([f"{k}\x01{v}\x02" for k, v in items if v is not None]).encode("utf-8")


#: What :func:`encode_dicts` writes for a None value (which :func:`encode_properties` omits).
NONE_WRITTEN = b"\x01None\x02"


def encode_dicts(dicts: Sequence[dict]) -> list[bytes] | None:
    r"""``name\x01value\x02`` for every entry of every dict, in its own order, with one generated
    f-string function per entry count (:func:`_items_encoder`): the bytes of
    :func:`encode_properties`, except that a None value is written as ``None`` instead of being
    left out (callers that may see one look for :data:`NONE_WRITTEN` and encode those dicts one by
    one). None when the dicts do not all have as many entries as the first."""
    if not dicts:
        return []
    try:
        return _items_encoder(len(dicts[0]))(map(dict.items, dicts))
    except ValueError:  # a dict with another number of entries (or a value whose format raised it)
        return None


@functools.lru_cache(maxsize=64)
def _items_encoder(k: int):
    r"""``enc(items)``: ``f"{k0}\x01{v0}\x02...".encode()`` for each ``dict.items()`` of ``k``
    entries in ``items`` (ValueError at one of another size). An f-string formats each name and
    value as ``format(x, "")``, as :func:`encode_properties` does, without a template to parse or
    a loop per entry. The generated source holds identifiers only: names and values come in
    through the unpacked items, so nothing needs escaping."""
    targets = ", ".join(f"(k{j}, v{j})" for j in range(k)) + ("," if k == 1 else "")
    body = "".join(f"{{k{j}}}\\x01{{v{j}}}\\x02" for j in range(k))
    src = (f"def enc(items):\n"
           f"    return [f\"{body}\".encode() for {targets or '()'} in items]\n")
    namespace: dict = {}
    exec(compile(src, f"<properties encoder for {k} entries>", "exec"), namespace)  # noqa: S102 - fixed source
    return namespace["enc"]


def encode_properties_many(props_list: Sequence[PropertiesInput]) -> list[bytes]:
    """:func:`encode_properties` of each entry (the same bytes): with :func:`encode_dicts` when
    the entries are dicts of one size without None values, otherwise entry by entry."""
    if props_list and set(map(type, props_list)) == {dict}:
        out = encode_dicts(props_list)
        if out is not None and NONE_WRITTEN not in b"\x00".join(out):
            return out
    return [encode_properties(p) for p in props_list]


def parse_properties(raw: bytes | memoryview | str) -> dict[str, str]:
    """Upstream ``string2messageProperties`` semantics on the raw bytes."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    # decoded once, then split: UTF-8 never puts 0x01/0x02 inside a multi-byte sequence, and a
    # malformed sequence never swallows them, so this equals splitting the bytes first (tested)
    out: dict[str, str] = {}
    for seg in bytes(raw).decode("utf-8", "replace").split("\x02"):
        name, _, value = seg.partition("\x01")
        if name and value:
            out[name] = value
    return out


def remove_property(raw: bytes, name: str) -> bytes:
    """Upstream ``MessageUtils.deleteProperty``: drop every entry that starts at the string start or
    right after 0x02, has exactly ``name`` followed by 0x01, up to and including the next 0x02
    (or the end)."""
    needle = name.encode("utf-8") + NAME_VALUE_SEPARATOR
    out = bytearray()
    i, n = 0, len(raw)
    while i < n:
        j = raw.find(PROPERTY_SEPARATOR, i)
        end = n if j < 0 else j + 1
        if not raw.startswith(needle, i):
            out += raw[i:end]
        i = end
    return bytes(out)


def with_crc_reserved(raw: bytes) -> bytes:
    """Properties as the CRC-mode writer stores them, before the digits are filled in."""
    if CRC32_KEY.encode() in raw:
        raw = remove_property(raw, CRC32_KEY)
    if raw and not raw.endswith(PROPERTY_SEPARATOR):
        raw += PROPERTY_SEPARATOR
    return raw + _CRC_PREFIX + b"0000000000" + PROPERTY_SEPARATOR


def crc_digits(crc: int) -> bytes:
    """10 ASCII digits of ``crc``, least-significant first (quirk 15.8)."""
    return f"{crc:010d}"[::-1].encode("ascii")


def parse_crc_digits(value: str) -> int | None:
    """Inverse of :func:`crc_digits`; ``None`` when the value is not 10 digits."""
    if len(value) != 10 or not value.isdecimal():  # (isdigit would pass superscripts, which int() refuses)
        return None
    return int(value[::-1])


def split_keys(keys: str | None) -> list[str]:
    """KEYS value split on a single space, empty parts dropped (FORMAT.md §6.5)."""
    if not keys:
        return []
    return [k for k in keys.split(KEY_SEPARATOR) if k]
