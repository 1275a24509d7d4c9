"""Options of the ``rocketmq`` data source, validated once on the driver.

Every bad value raises :class:`~rmqstore.errors.ConfigError` naming the option, and so does an
unknown option name (a typo such as ``startingOffset`` must not be silently ignored). Besides the
source's own options, any ``MessageStoreConfig`` key (``mappedFileSizeCommitLog``, ``maxIndexNum``
... in RocketMQ's camelCase or snake_case) can be given, as can ``config`` (a broker.conf path);
segment sizes are then checked against the store's files (:func:`~rmqstore.layout.infer_config`).
Nothing here imports pyspark.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Mapping

from ..config import MessageStoreConfig, read_properties_file
from ..errors import ConfigError
from ..layout import config_with_geometry, config_with_sizes, cq_segment_size_of, index_size_of, infer_config, \
    segment_size_of
from . import fs as RFS
from ..errors import StoreNotFoundError
from .paths import expand, parse_paths
from .scan import DEFAULT_SPLIT_SIZE
from ..io import paths

EARLIEST, LATEST = "earliest", "latest"

#: canonical option names (matched ignoring case)
OPTIONS = ("path", "paths", "brokerName", "config", "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
           "topics", "includeBody", "rawBody", "splitSize", "verifyCRC", "failOnDataLoss",
           "maxBytesPerTrigger", "maxOffsetsPerTrigger")
_CANON = {o.lower(): o for o in OPTIONS}
#: options Spark's catalog adds to a table's options (``CREATE TABLE ... USING rocketmq``): not ours
#: (``location`` is where a catalog table keeps its path: read as the path when no path is given)
_CATALOG_KEYS = frozenset({"owner", "external", "location", "provider", "comment", "is_managed_location"})
_CONFIG_KEYS = {f.name.replace("_", "").lower(): f.name for f in dataclasses.fields(MessageStoreConfig)}
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
MIN_SPLIT_SIZE = 64


@dataclass(frozen=True)
class StoreLoc:
    """One store read: its directory, its config (segment sizes from its files) and broker name."""

    store_dir: str
    cfg: MessageStoreConfig
    broker_name: str
    #: how to open a remote store (S3 settings; empty for local stores)
    fs_settings: dict | None = None

    @property
    def seg_size(self) -> int:
        return self.cfg.mapped_file_size_commit_log


def broker_name_of(store_dir: str) -> str:
    """``brokerName`` from the store's ``broker.conf`` (in the store directory or its ``config/``),
    else the directory's name."""
    for conf in (os.path.join(store_dir, paths.BROKER_CONF), os.path.join(paths.config_dir(store_dir), paths.BROKER_CONF)):
        if os.path.isfile(conf):
            try:
                name = str(read_properties_file(conf).get("brokerName", "")).strip()
            except ConfigError:
                name = ""
            if name:
                return name
    return os.path.basename(os.path.normpath(store_dir)) or store_dir


@dataclass(frozen=True)
class ReadOptions:
    """The parsed options. Offsets are commitlog byte offsets; timestamps epoch milliseconds."""

    store_dir: str
    cfg: MessageStoreConfig
    starting_offsets: str | int = EARLIEST
    ending_offsets: str | int = LATEST
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    topics: frozenset[str] | None = None
    include_body: bool = True
    #: keep a compressed body's stored bytes instead of decoding it
    raw_body: bool = False
    #: a damaged record ends the read (CorruptRecordError) instead of being skipped and logged
    fail_on_data_loss: bool = False
    split_size: int = DEFAULT_SPLIT_SIZE
    verify_crc: bool = False
    max_bytes_per_trigger: int | None = None
    #: streaming: at most this many messages per micro-batch (Kafka's option name)
    max_offsets_per_trigger: int | None = None
    #: Kafka-style queue offsets: topic -> {queue id: offset}; -2 earliest, -1 latest (start only -2/-1/n,
    #: end -1/n); the read is restricted to the topics named
    starting_queue_offsets: dict | None = None
    ending_queue_offsets: dict | None = None
    #: every store read (the first is ``store_dir``/``cfg``)
    stores: tuple[StoreLoc, ...] = ()

    @property
    def seg_size(self) -> int:
        return self.cfg.mapped_file_size_commit_log


def _camel(field_name: str) -> str:
    """RocketMQ's spelling of a MessageStoreConfig field (``mapped_file_size_commit_log`` ->
    ``mappedFileSizeCommitLog``; the acronyms upstream capitalises are kept as they are spelled)."""
    head, *rest = field_name.split("_")
    word = {"crc": "CRC"}
    return head + "".join(word.get(w, w.capitalize()) for w in rest)


def _bool(name: str, value) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s not in ("true", "false"):
        raise ConfigError(f"option {name}: expected true or false, got {value!r}")
    return s == "true"


def parse_size(name: str, value, minimum: int = 1) -> int:
    """Bytes: an integer, optionally with a k/m/g/t suffix (binary units: ``64m`` = 64 MiB)."""
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    else:
        m = _SIZE.match(str(value))
        if not m:
            raise ConfigError(f"option {name}: expected a byte count such as 67108864 or 64m, got {value!r}")
        n = int(m.group(1)) * _UNITS[(m.group(2) or "")[:1].lower()]
    if n < minimum:
        raise ConfigError(f"option {name}: must be at least {minimum}, got {value!r}")
    return n


def _offset(name: str, value, allowed: tuple[str, ...]) -> str | int:
    s = str(value).strip()
    if s.lower() in allowed:
        return s.lower()
    try:
        n = int(s)
    except ValueError:
        raise ConfigError(f"option {name}: expected {' or '.join(allowed)} or a commitlog offset (an integer "
                          f">= 0), got {value!r}") from None
    if n < 0:
        raise ConfigError(f"option {name}: a commitlog offset must be >= 0, got {value!r}")
    return n


def _queue_offsets(name: str, value, specials: tuple[int, ...]) -> dict[str, dict[int, int]]:
    """Kafka's JSON form: ``{"Orders": {"0": 10, "1": -2}}`` (topic -> queue id -> queue offset)."""
    try:
        doc = json.loads(str(value))
    except ValueError as e:
        raise ConfigError(f"option {name}: not JSON ({e}); expected e.g. {{\"Orders\": {{\"0\": 10, \"1\": -2}}}}") \
            from None
    if not isinstance(doc, dict) or not doc:
        raise ConfigError(f"option {name}: expected a JSON object of topics, got {value!r}")
    out: dict[str, dict[int, int]] = {}
    allowed = " or ".join(str(x) for x in specials)
    for topic, queues in doc.items():
        if not isinstance(topic, str) or not topic:
            raise ConfigError(f"option {name}: topic names must be non-empty strings")
        if not isinstance(queues, dict) or not queues:
            raise ConfigError(f"option {name}: topic {topic!r}: expected an object of queue id -> offset")
        out[topic] = {}
        for qid, off in queues.items():
            if not re.fullmatch(r"\d+", str(qid)) or int(qid) > 2**31 - 1:
                raise ConfigError(f"option {name}: topic {topic!r}: queue id {qid!r} is not a queue id (0, 1, ...)")
            if isinstance(off, bool) or not isinstance(off, int) or (off < 0 and off not in specials):
                raise ConfigError(f"option {name}: {topic}/{qid}: expected a queue offset >= 0 or {allowed}, "
                                  f"got {off!r}")
            out[topic][int(qid)] = off
    return out


def parse_timestamp(name: str, value) -> int:
    """Epoch milliseconds, or an ISO-8601 date-time (UTC when it has no offset)."""
    s = str(value).strip()
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"option {name}: expected epoch milliseconds or an ISO-8601 date-time such as "
                          f"2024-01-31T12:00:00Z, got {value!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def resolve_config(store_dir: str, config_path: str | None, keys: Mapping[str, str],
                   base: MessageStoreConfig | None = None, option_names: Mapping[str, str] | None = None,
                   infer=infer_config) -> MessageStoreConfig:
    """``base`` (or defaults), then the broker.conf, then the option keys (field name -> value;
    ``option_names`` maps them back to the option as given); sizes from the files win."""
    option_names = option_names or {}
    props: dict[str, object] = {}
    if base is not None:
        props.update({f.name: getattr(base, f.name) for f in dataclasses.fields(base)})
    if config_path:
        try:
            props.update(read_properties_file(config_path))
        except ConfigError as e:
            raise ConfigError(f"option config: {e}") from e
    for name, value in keys.items():  # each option on its own, so that an error names it
        try:
            MessageStoreConfig.from_properties({name: value})
        except ConfigError as e:
            raise ConfigError(f"option {option_names.get(name, name)}: {e}") from e
    props.update(keys)
    try:
        cfg = MessageStoreConfig.from_properties(props) if props else MessageStoreConfig()
    except ConfigError as e:
        given = ", ".join(option_names.get(k, k) for k in keys) or "config"
        raise ConfigError(f"option {given}: {e}") from e
    return infer(store_dir, cfg)


def _remote_segment_size(location: str, cfg: MessageStoreConfig) -> MessageStoreConfig:
    """``infer_config`` for a remote store: the segment sizes from its objects' names and sizes,
    by the rule local stores follow (:func:`~rmqstore.layout.config_with_sizes`): commitlog,
    consume-queue and index files alike, and an index geometry other than upstream's 1:4 read from
    an index file's contents (:func:`~rmqstore.layout.config_with_geometry`, ranged reads), so that
    a job over a copy in S3 answers as over the same store on disk, and fails as it does."""
    settings = RFS.settings_for(location)
    commitlog = RFS.list_files(location, settings, paths.COMMITLOG)
    if not any(name.isdigit() and len(name) == 20 for name, _ in commitlog):
        raise StoreNotFoundError("not a store: no commitlog segment files", path=location)
    queues: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for rel, size in RFS.list_tree(location, settings, paths.CONSUMEQUEUE):
        parts = rel.split("/")
        if len(parts) == 3:
            queues.setdefault((parts[0], parts[1]), []).append((parts[2], size))
    index = RFS.list_files(location, settings, paths.INDEX)
    cfg = config_with_sizes(cfg, segment_size_of(commitlog), cq_segment_size_of(queues), index_size_of(index))
    return config_with_geometry(cfg, index, lambda name, size: RFS.index_geometry(location, f"{paths.INDEX}/{name}",
                                                                                size), RFS.join(location, paths.INDEX))


@dataclass
class _SortedKeys:
    """The options as given, sorted by whose they are."""

    own: dict[str, str] = dataclasses.field(default_factory=dict)
    s3: dict[str, str] = dataclasses.field(default_factory=dict)
    #: MessageStoreConfig field name -> value, and field name -> the option's RocketMQ spelling
    cfg_keys: dict[str, str] = dataclasses.field(default_factory=dict)
    given: dict[str, str] = dataclasses.field(default_factory=dict)


def _sort_keys(options: Mapping[str, str]) -> _SortedKeys:
    """The source's own options, S3 settings and MessageStoreConfig keys; an unknown name raises. A
    catalog table's ``location`` stands in for a missing path."""
    keys = _SortedKeys()
    catalog_location = None
    for key, value in options.items():
        k = str(key).lower()
        if k in RFS.S3_OPTIONS:
            keys.s3[RFS.S3_OPTIONS[k]] = str(value)
            continue
        if k in _CATALOG_KEYS:
            if k == "location" and value:
                catalog_location = str(value)
            continue
        if k in _CANON:
            keys.own[_CANON[k]] = value
        elif k.replace("_", "") in _CONFIG_KEYS:
            field = _CONFIG_KEYS[k.replace("_", "")]
            keys.cfg_keys[field] = value
            keys.given[field] = _camel(field)
        else:
            raise ConfigError(f"unknown option {key!r} for format rocketmq; options are {', '.join(OPTIONS)} "
                              "and the MessageStoreConfig keys (e.g. mappedFileSizeCommitLog)")
    if not keys.own.get("path") and not keys.own.get("paths") and catalog_location:
        keys.own["path"] = catalog_location
    if not keys.own.get("path") and not keys.own.get("paths"):
        raise ConfigError("option path: no store directory given; use .load('/path/to/store') (options given: "
                          f"{', '.join(sorted(map(str, options))) or 'none'})")
    return keys


def _store_dirs(own: Mapping[str, str], s3: dict, streaming: bool | None) -> list[str]:
    """Every store directory the path options name (globs and parents of stores expanded), once each."""
    dirs: list[str] = []
    for loc in parse_paths(own.get("path"), own.get("paths")):
        for d in (RFS.expand_remote(loc, s3) if RFS.is_remote(loc) else expand([loc])):
            if d not in dirs:
                dirs.append(d)
    if streaming and any(RFS.is_remote(d) for d in dirs):
        raise ConfigError("option path: a stream follows one local store; object storage and HDFS are for batch "
                          "reads")
    if streaming and len(dirs) > 1:
        raise ConfigError(f"option path: a stream follows one store; {len(dirs)} were given ({', '.join(dirs[:3])}"
                          f"{', ...' if len(dirs) > 3 else ''})")
    if own.get("brokerName") is not None and len(dirs) > 1:
        raise ConfigError("option brokerName: names the broker of one store; with several stores each is named "
                          "by its broker.conf or its directory")
    return dirs


def _offset_options(own: Mapping[str, str], streaming: bool | None) -> dict[str, object]:
    """startingOffsets/endingOffsets (commitlog offsets or Kafka's JSON) and the timestamps."""
    kw: dict[str, object] = {}
    if "startingOffsets" in own:
        if str(own["startingOffsets"]).strip().startswith("{"):
            kw["starting_queue_offsets"] = _queue_offsets("startingOffsets", own["startingOffsets"], (-2, -1))
        else:
            kw["starting_offsets"] = _offset("startingOffsets", own["startingOffsets"], (EARLIEST, LATEST))
    elif streaming:
        kw["starting_offsets"] = LATEST
    if "endingOffsets" in own:
        if streaming:
            raise ConfigError("option endingOffsets: only for batch reads (a stream has no end)")
        if str(own["endingOffsets"]).strip().startswith("{"):
            kw["ending_queue_offsets"] = _queue_offsets("endingOffsets", own["endingOffsets"], (-1,))
        else:
            kw["ending_offsets"] = _offset("endingOffsets", own["endingOffsets"], (LATEST,))
    for opt, attr in (("startingTimestamp", "starting_timestamp"), ("endingTimestamp", "ending_timestamp")):
        if opt in own:
            kw[attr] = parse_timestamp(opt, own[opt])
    return kw


_BOOL_OPTIONS = (("includeBody", "include_body"), ("rawBody", "raw_body"), ("failOnDataLoss", "fail_on_data_loss"),
                 ("verifyCRC", "verify_crc"))


def _read_options(own: Mapping[str, str], streaming: bool | None) -> dict[str, object]:
    """topics, the true/false options, splitSize and the streaming limits."""
    kw: dict[str, object] = {}
    if "topics" in own:
        names = [t.strip() for t in str(own["topics"]).split(",")]
        if not names or any(not t for t in names):
            raise ConfigError(f"option topics: expected a comma-separated list of topic names, got {own['topics']!r}")
        kw["topics"] = frozenset(names)
    for opt, attr in _BOOL_OPTIONS:
        if opt in own:
            kw[attr] = _bool(opt, own[opt])
    if "splitSize" in own:
        kw["split_size"] = parse_size("splitSize", own["splitSize"], MIN_SPLIT_SIZE)
    if "maxBytesPerTrigger" in own:
        if streaming is False:
            raise ConfigError("option maxBytesPerTrigger: only for streaming reads (spark.readStream)")
        kw["max_bytes_per_trigger"] = parse_size("maxBytesPerTrigger", own["maxBytesPerTrigger"])
    if "maxOffsetsPerTrigger" in own:
        if streaming is False:
            raise ConfigError("option maxOffsetsPerTrigger: only for streaming reads (spark.readStream)")
        kw["max_offsets_per_trigger"] = _max_offsets(own["maxOffsetsPerTrigger"])
    return kw


def _max_offsets(value) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"option maxOffsetsPerTrigger: expected a number of messages >= 1, got {value!r}")
    return n


def _check_ranges(kw: Mapping[str, object]) -> None:
    """Queue offsets name only topics the topics option names; no range ends before it starts."""
    for name in ("starting_queue_offsets", "ending_queue_offsets"):
        if name in kw and "topics" in kw and set(kw[name]) - kw["topics"]:
            raise ConfigError(f"option {'startingOffsets' if name.startswith('start') else 'endingOffsets'}: "
                              f"names topics outside the topics option: {', '.join(sorted(set(kw[name]) - kw['topics']))}")
    s, e = kw.get("starting_offsets", EARLIEST), kw.get("ending_offsets", LATEST)
    if isinstance(s, int) and isinstance(e, int) and e < s:
        raise ConfigError(f"option endingOffsets: {e} is before startingOffsets {s}")
    st, et = kw.get("starting_timestamp"), kw.get("ending_timestamp")
    if st is not None and et is not None and et < st:
        raise ConfigError(f"option endingTimestamp: {et} is before startingTimestamp {st}")


def _store_locs(dirs: list[str], keys: _SortedKeys, s3: dict,
                base_cfg: MessageStoreConfig | None) -> list[StoreLoc]:
    """Each store's config (broker.conf, option keys, sizes from its files) and broker name."""
    own = keys.own
    stores = []
    for d in dirs:
        remote = RFS.is_remote(d)
        if remote:
            RFS.register(d, s3)
        cfg = resolve_config(d, own.get("config"), keys.cfg_keys, base_cfg, keys.given,
                             infer=_remote_segment_size if remote else infer_config)
        name = str(own["brokerName"]).strip() if own.get("brokerName") is not None else \
            (d.rstrip("/").rsplit("/", 1)[-1] if remote else broker_name_of(d))
        if not name:
            raise ConfigError("option brokerName: must not be empty")
        stores.append(StoreLoc(d, cfg, name, s3 if remote else None))
    return stores


def parse_options(options: Mapping[str, str], *, streaming: bool | None,
                  base_cfg: MessageStoreConfig | None = None) -> ReadOptions:
    """Validate the options (``streaming`` None: accept both batch- and stream-only options)."""
    keys = _sort_keys(options)
    s3 = RFS.s3_settings(keys.s3)
    dirs = _store_dirs(keys.own, s3, streaming)
    kw = _offset_options(keys.own, streaming)
    kw.update(_read_options(keys.own, streaming))
    _check_ranges(kw)
    stores = _store_locs(dirs, keys, s3, base_cfg)
    return ReadOptions(store_dir=stores[0].store_dir, cfg=stores[0].cfg, stores=tuple(stores), **kw)
