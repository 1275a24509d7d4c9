"""Consumer offsets: the committed position of every consumer group in every queue
(mirrors ``org.apache.rocketmq.broker.offset.ConsumerOffsetManager``).

The file is the broker's own ``<store>/config/consumerOffset.json``::

    {
        "dataVersion": {"counter": 3, "stateVersion": 0, "timestamp": 1700000000000},
        "offsetTable": {"Orders@billing": {"0": 42, "1": 17}}
    }

``offsetTable`` maps ``topic@group`` to ``{queueId: next offset to consume}``. RocketMQ's broker
writes it with fastjson, whose map keys are unquoted integers (``{0:42,1:17}``); both that and
standard JSON (quoted keys) are read. What is written is what RocketMQ 5's broker writes
(``ConsumerOffsetManager.encode(true)``: fastjson 1.2.83's ``PrettyFormat``, tabs, unquoted integer
keys, the bean's properties ``dataVersion``, ``groupTopicMap``, ``offsetTable`` in that order), so a
store moved between rmqstore and a RocketMQ broker keeps every group's progress and the file reads
the same to an operator. One difference: fastjson writes a hash map's entries in Java's hash order,
we write them sorted (no reader depends on the order). ``dataVersion`` is kept from the file loaded
and moves on (counter + 1, timestamp now) at each write, as ``DataVersion.nextVersion`` does.

Persisting is atomic (beyond upstream, which rewrites the file in place after moving the old one
to ``.bak``): the new text goes to a temporary file that is fsync'd, the current file becomes
``consumerOffset.json.bak`` and the temporary file is renamed into place, then the directory is
fsync'd. Loading falls back to the ``.bak`` copy when the file is missing, empty or unreadable,
as upstream's ``ConfigManager.load`` does.

Embedded consumers (:mod:`rmqstore.consumer`) and the broker use this one component.
"""
from __future__ import annotations

import functools
import json
import logging
import threading
import time

from ..errors import CorruptRecordError, ReadOnlyStoreError, StoreIOError
from ..io.mapped_file import atomic_write_text
from ..io import paths

log = logging.getLogger(__name__)

#: where the broker keeps the file, relative to the store directory
CONSUMER_OFFSET_FILE = paths.CONSUMER_OFFSET_FILE
#: RocketMQ's ``ConsumerOffsetManager.TOPIC_GROUP_SEPARATOR``
TOPIC_GROUP_SEPARATOR = "@"


def parse_broker_json(text: str):
    """JSON as fastjson writes the broker's config files: integer map keys may be unquoted."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
            continue
        out.append(c)
        i += 1
        if c in "{,":
            j = i
            while j < n and text[j] in " \t\r\n":
                j += 1
            k = j + (1 if j < n and text[j] == "-" else 0)
            k2 = k
            while k2 < n and text[k2].isdigit():
                k2 += 1
            m = k2
            while m < n and text[m] in " \t\r\n":
                m += 1
            if k2 > k and m < n and text[m] == ":":
                out.append(text[i:j] + '"' + text[j:k2] + '"')
                i = k2
    return json.loads("".join(out))


def decode_offset_table(text: str, path: str) -> dict[str, dict[int, int]]:
    """``{"topic@group": {queue_id: offset}}`` of a consumerOffset.json text (either key form)."""
    return decode_offset_file(text, path)[0]


def decode_offset_file(text: str, path: str) -> tuple[dict[str, dict[int, int]], dict[str, int]]:
    """The offset table and the ``dataVersion`` (``counter``, ``stateVersion``, ``timestamp``; zeros
    when the file has none) of a consumerOffset.json text."""
    try:
        doc = parse_broker_json(text)
        table = doc.get("offsetTable") or {} if isinstance(doc, dict) else None
        if not isinstance(table, dict):
            raise ValueError("no offsetTable object")
        offsets = {str(k): {int(q): int(o) for q, o in (v or {}).items()} for k, v in table.items()}
        dv = doc.get("dataVersion")
        dv = dv if isinstance(dv, dict) else {}
        version = {k: int(dv.get(k) or 0) for k in ("counter", "stateVersion", "timestamp")}
    except (ValueError, TypeError, AttributeError) as e:
        raise CorruptRecordError(f"cannot parse consumer offsets: {e}", path=path) from e
    return offsets, version


def java_split(key: str, sep: str = TOPIC_GROUP_SEPARATOR) -> list[str]:
    """Java's ``String.split``: trailing empty strings dropped."""
    parts = key.split(sep)
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return parts


def encode_offset_file(table: dict[str, dict[int, int]], version: dict[str, int]) -> str:
    """``ConsumerOffsetManager.encode(true)`` of RocketMQ 5 (fastjson 1.2.83, ``PrettyFormat``): the
    bean's getters in name order -- ``dataVersion``, ``groupTopicMap`` (each group's topics, from the
    keys that split in two at ``@``), ``offsetTable`` -- a map with string keys puts each entry on its
    own line, a map with integer keys (a queue's offsets) writes its entries on one line and its
    closing brace on the next; no newline at the end."""
    q = functools.partial(json.dumps, ensure_ascii=False)
    topics_of: dict[str, set[str]] = {}
    for key in table:
        parts = java_split(key)
        if len(parts) == 2:
            topics_of.setdefault(parts[1], set()).add(parts[0])
    groups = ",".join(f"\n\t\t{q(g)}:[{','.join(q(t) for t in sorted(ts))}]" for g, ts in sorted(topics_of.items()))
    entries = ",".join(f"\n\t\t{q(k)}:" + ("{" + ",".join(f"{i}:{o}" for i, o in sorted(v.items())) + "\n\t\t}"
                                           if v else "{}") for k, v in sorted(table.items()))
    return ("{\n\t\"dataVersion\":{\n"
            f"\t\t\"counter\":{version.get('counter', 0)},\n"
            f"\t\t\"stateVersion\":{version.get('stateVersion', 0)},\n"
            f"\t\t\"timestamp\":{version.get('timestamp', 0)}\n\t}},\n"
            f"\t\"groupTopicMap\":{{{groups}{chr(10) + chr(9) if groups else ''}}},\n"
            f"\t\"offsetTable\":{{{entries}{chr(10) + chr(9) if entries else ''}}}\n}}")


def read_offset_file(path: str) -> dict[str, dict[int, int]] | None:
    """The offset table of ``path``, or of ``path.bak`` when ``path`` is missing or empty; None when
    neither holds one. A file that does not parse raises :class:`CorruptRecordError` unless its
    ``.bak`` copy parses (upstream's ``ConfigManager.load`` order)."""
    got = read_offset_doc(path)
    return None if got is None else got[0]


def read_offset_doc(path: str) -> tuple[dict[str, dict[int, int]], dict[str, int]] | None:
    """:func:`read_offset_file`, with the file's ``dataVersion``."""
    error: CorruptRecordError | None = None
    for p in (path, path + ".bak"):
        try:
            with open(p, encoding="utf-8") as fh:
                text = fh.read()
        except FileNotFoundError:
            continue
        except UnicodeDecodeError as e:
            log.error("%s", CorruptRecordError(f"consumer offsets are not UTF-8: {e}", path=p))
            error = error or CorruptRecordError(f"consumer offsets are not UTF-8: {e}", path=p)
            continue
        except OSError as e:
            raise StoreIOError(f"cannot read consumer offsets: {e.strerror}", path=p) from e
        if not text.strip():
            continue
        try:
            return decode_offset_file(text, p)
        except CorruptRecordError as e:
            log.error("%s", e)
            error = error or e
    if error is not None:
        raise error
    return None


class ConsumerOffsetManager:
    """Committed offsets of consumer groups, kept in memory and persisted to one JSON file.

    ``path`` is the JSON file (normally ``<store>/config/consumerOffset.json``); None keeps the
    offsets in memory only. A read-only manager loads but never writes. Thread-safe."""

    def __init__(self, path: str | None, *, read_only: bool = False):
        self.path = path
        self.read_only = read_only
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()  # one writer of the file at a time (upstream: synchronized)
        self._table: dict[str, dict[int, int]] = {}
        #: ``topic@group`` -> {queue id: next offset of the last pull answered}: upstream's
        #: ``pullOffsetTable``, in memory only (what a consumer holds but has not committed yet)
        self._pulled: dict[str, dict[int, int]] = {}
        self._dirty = False
        self._version = {"counter": 0, "stateVersion": 0, "timestamp": 0}

    # --- loading and persisting ------------------------------------------------------------------
    def load(self) -> None:
        """Read the file (or its ``.bak``); a missing file is an empty table."""
        if self.path is None:
            return
        table, version = read_offset_doc(self.path) or ({}, None)
        with self._lock:
            self._table = table
            if version is not None:
                self._version = version
            self._dirty = False

    def encode(self) -> str:
        """The file's text as RocketMQ's broker writes it (:func:`encode_offset_file`)."""
        with self._lock:
            table = {k: dict(v) for k, v in self._table.items()}
            version = dict(self._version)
        return encode_offset_file(table, version)

    @property
    def data_version(self) -> dict[str, int]:
        """``counter``, ``stateVersion`` and ``timestamp`` of the last file loaded or written."""
        with self._lock:
            return dict(self._version)

    def persist(self) -> bool:
        """Write the file when something changed since the last write; True when it wrote."""
        if self.path is None or not self._dirty:
            return False
        if self.read_only:
            raise ReadOnlyStoreError("consumer offsets of a read-only store are not written", path=self.path)
        with self._persist_lock:
            with self._lock:
                if not self._dirty:
                    return False
                self._dirty = False
                self._version["counter"] += 1
                self._version["timestamp"] = int(time.time() * 1000)
            text = self.encode()
            try:
                atomic_write_text(self.path, text, keep_bak=True)
            except OSError as e:
                with self._lock:
                    self._dirty = True
                raise StoreIOError(f"cannot write consumer offsets: {e.strerror}", path=self.path) from e
        return True

    # --- the table -------------------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` (the next message to consume) of ``group`` in ``topic``/``queue_id``.
        A smaller offset than the stored one is taken too (a reset), as upstream does."""
        key = topic + TOPIC_GROUP_SEPARATOR + group
        with self._lock:
            queues = self._table.setdefault(key, {})
            if queues.get(queue_id) != offset:
                queues[queue_id] = int(offset)
                self._dirty = True

    def query_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The committed offset, or None when the group never committed one for that queue."""
        with self._lock:
            return self._table.get(topic + TOPIC_GROUP_SEPARATOR + group, {}).get(queue_id)

    def commit_pull_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """``commitPullOffset``: the next offset of a pull just answered (one call per pull, never
        written to the file)."""
        key = topic + TOPIC_GROUP_SEPARATOR + group
        with self._lock:
            queues = self._pulled.get(key)
            if queues is None:
                queues = self._pulled[key] = {}
            queues[queue_id] = offset

    def query_pull_offsets(self, group: str, topic: str) -> dict[int, int]:
        """The pull offsets recorded for ``group`` in ``topic`` (empty when none)."""
        with self._lock:
            return dict(self._pulled.get(topic + TOPIC_GROUP_SEPARATOR + group, {}))

    def clear_pull_offsets(self, group: str, topic: str) -> None:
        """``clearPullOffset`` (after a reset: what was pulled before it no longer counts)."""
        with self._lock:
            self._pulled.pop(topic + TOPIC_GROUP_SEPARATOR + group, None)

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        with self._lock:
            return dict(self._table.get(topic + TOPIC_GROUP_SEPARATOR + group, {}))

    def groups_of_topic(self, topic: str) -> set[str]:
        with self._lock:
            return {g for t, g in map(_split_key, self._table) if t == topic}

    def topics_of_group(self, group: str) -> set[str]:
        with self._lock:
            return {t for t, g in map(_split_key, self._table) if g == group}

    def table(self) -> dict[tuple[str, str], dict[int, int]]:
        """A copy of every entry, keyed ``(topic, group)``."""
        with self._lock:
            return {_split_key(k): dict(v) for k, v in self._table.items()}

    def remove_group(self, group: str) -> None:
        with self._lock:
            for key in [k for k in self._table if _split_key(k)[1] == group]:
                del self._table[key]
                self._dirty = True
            for key in [k for k in self._pulled if _split_key(k)[1] == group]:
                del self._pulled[key]


def _split_key(key: str) -> tuple[str, str]:
    """``topic@group`` to ``(topic, group)``, split at the first ``@`` (topics cannot hold one)."""
    topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
    return topic, group
