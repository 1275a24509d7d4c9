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

from itertools import chain, starmap
from operator import itemgetter
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


def uniform_keys(props_list: Sequence[PropertiesInput]) -> tuple | None:
    """The key tuple shared, in the same order, by every entry when all are ``dict`` (as a
    producer builds them); None otherwise."""
    if props_list and set(map(type, props_list)) == {dict}:
        orders = set(map(tuple, props_list))
        if len(orders) == 1:
            return next(iter(orders))
    return None


def encode_properties_many(props_list: Sequence[PropertiesInput], keys: tuple | None = None) -> list[bytes]:
    """:func:`encode_properties` of each entry, the same bytes.

    With ``keys`` from :func:`uniform_keys` (and no ``None`` value), every entry is encoded with one
    format template and C-level iteration; otherwise entry by entry."""
    n = len(props_list)
    if keys is not None:
        if not keys:
            return [b""] * n
        try:  # a None value is omitted: entry by entry then (so is a value that cannot be compared)
            has_none = None in chain.from_iterable(map(dict.values, props_list))
        except Exception:  # noqa: BLE001 - e.g. an array value whose == is not a bool
            has_none = True
        if not has_none:
            if all(type(k) is str and k.isidentifier() for k in keys):  # named fields: no value tuples
                template = "".join([f"{k}\x01{{{k}}}\x02" for k in keys])
                return list(map(str.encode, map(template.format_map, props_list)))
            template = "".join(map(_template_part, keys))
            values = map(itemgetter(*keys), props_list)
            strings = map(template.format, values) if len(keys) == 1 else starmap(template.format, values)
            return list(map(str.encode, strings))
    return [encode_properties(p) for p in props_list]


def _template_part(key: object) -> str:
    """``key 0x01 {} 0x02`` for :meth:`str.format`, braces in the key escaped."""
    return f"{key}".replace("{", "{{").replace("}", "}}") + "\x01{}\x02"


def parse_properties(raw: bytes | memoryview | str) -> dict[str, str]:
    """Upstream ``string2messageProperties`` semantics on the raw bytes."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    out: dict[str, str] = {}
    for seg in bytes(raw).split(PROPERTY_SEPARATOR):
        i = seg.find(NAME_VALUE_SEPARATOR)
        if 0 < i < len(seg) - 1:
            out[seg[:i].decode("utf-8", "replace")] = seg[i + 1:].decode("utf-8", "replace")
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
    if len(value) != 10 or not value.isdigit():
        return None
    return int(value[::-1])


def split_keys(keys: str | None) -> list[str]:
    """KEYS value split on a single space, empty parts dropped (FORMAT.md §6.5)."""
    if not keys:
        return []
    return [k for k in keys.split(KEY_SEPARATOR) if k]
