"""Reading commands. Each opens the store read-only: no lock is taken and no byte on disk changes,
so they are safe on a store a broker is still running on (they see what was flushed). The commands
that fetch given messages are in :mod:`.commands_query`, the helpers they share in
:mod:`.read_common`; ``COMMANDS`` lists them all."""
from __future__ import annotations

import dataclasses
import heapq
from typing import Iterator, NamedTuple

import click
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .commands_query import print_, pull, query_id, query_key, query_offset, query_unique_key
from .common import KEY_VALUE, TIME, StoreCommand, store_options
from .errors import UnknownTopicError, UsageProblem
from .read_common import CLI_GROUP, CONTINUE, MAX_TIME, known_topics, require_topic
from .render import TIME_MIN_WIDTH, body_preview, fmt_ts, record_dict, shown_body, tz_note


# ---------------------------------------------------------------------------------------------
# browse
# ---------------------------------------------------------------------------------------------
class QueueSpan(NamedTuple):
    """Queue offsets ``[start, stop)`` of one queue."""

    topic: str
    queue_id: int
    start: int
    stop: int


def iter_queue(store, span: QueueSpan, subscription: str | None = None, on_skipped=None) -> Iterator:
    """Messages of one queue with queue offsets in ``span``, pulled page by page. A damaged
    message is stepped over by the pull itself; ``on_skipped(SkippedMessage)`` hears of each."""
    topic, queue_id, off, stop = span
    while off < stop:
        g = store.get_message(CLI_GROUP, topic, queue_id, off, 32, subscription)
        if on_skipped is not None:
            for k in g.skipped:
                if k.queue_offset < stop:
                    on_skipped(k)
        for m in g.messages:
            if m.queue_offset >= stop:
                return
            yield m
        nxt = g.next_begin_offset
        keeps_going = g.status.value in CONTINUE or g.status.value == "OFFSET_TOO_SMALL"  # (jump to min)
        if not keeps_going or nxt <= off:
            return
        off = nxt


def _line(rec) -> Text:
    t = Text()
    t.append(fmt_ts(rec.store_timestamp), style="cyan")
    t.append(f"  {rec.topic}:{rec.queue_id}:{rec.queue_offset}", style="bold")
    t.append(f"  phy={rec.phy_offset}  id={rec.msg_id}")
    if rec.tags:
        t.append(f"  tags={rec.tags}", style="green")
    if rec.keys:
        t.append(f"  keys={' '.join(rec.keys)}", style="yellow")
    t.append("  " + body_preview(shown_body(rec)[0], 80))
    return t


def _browse_spans(st, topic: str | None, queues: tuple[int, ...], begin: int | None,
                  end: int | None) -> list[QueueSpan]:
    """The queue offsets of each queue browsed that hold the store-time window."""
    if topic is not None:
        scope = [(topic, q) for q in require_topic(st, topic)]
    else:
        scope = [(t, q) for t, qs in sorted(known_topics(st).items()) for q in qs]
    if queues:
        if topic is not None:
            for q in queues:
                require_topic(st, topic, q)
        scope = [(t, q) for t, q in scope if q in queues]
    spans = []
    for t, q in scope:
        lo, hi = st.get_min_offset_in_queue(t, q), st.get_max_offset_in_queue(t, q)
        start = lo if begin is None else max(lo, st.get_offset_in_queue_by_time(t, q, begin, "lower"))
        stop = hi if end is None else min(hi, st.get_offset_in_queue_by_time(t, q, end, "upper") + 1)
        if start < stop:
            spans.append(QueueSpan(t, q, start, stop))
    return spans


@dataclasses.dataclass(frozen=True)
class _BrowseFilter:
    """What a browsed message must match: store time in ``[begin, end]``, any of ``keys``, every
    one of ``needles`` in its body, every property of ``props``."""

    begin: int
    end: int
    keys: frozenset[str]
    needles: tuple[bytes, ...]
    props: tuple[tuple[str, str], ...]

    def matches(self, rec) -> bool:
        if not (self.begin <= rec.store_timestamp <= self.end):
            return False
        if self.keys and self.keys.isdisjoint(rec.keys):
            return False
        if self.needles and not all(n in bytes(rec.body) for n in self.needles):
            return False
        return not (self.props and any(rec.properties.get(k) != v for k, v in self.props))


@click.command()
@click.argument("topic", required=False)
@click.option("--begin", type=TIME, default=None, help="Earliest store time: epoch ms or ISO time.")
@click.option("--end", type=TIME, default=None, help="Latest store time: epoch ms or ISO time.")
@click.option("--queue", "-q", "queues", type=click.IntRange(0), multiple=True, help="Only these queues (repeatable).")
@click.option("--tags", "subscription", default=None, metavar="EXPR", help='Tag expression, e.g. "TagA || TagB".')
@click.option("--key", "keys", multiple=True, help="Only messages with this KEYS token (repeatable: any of them).")
@click.option("--grep", "greps", multiple=True, metavar="TEXT",
              help="Only messages whose body contains TEXT (UTF-8; repeatable: all of them).")
@click.option("--property", "props", type=KEY_VALUE, multiple=True,
              help="Only messages with property NAME=VALUE (repeatable: all of them).")
@click.option("--limit", type=click.IntRange(0), default=0, help="Stop after this many matches (0 = no limit).")
@click.option("--no-body", is_flag=True, help="Leave bodies out of --json output.")
@store_options
def browse(cmd: StoreCommand, topic: str | None, begin: int | None, end: int | None, queues: tuple[int, ...],
           subscription: str | None, keys: tuple[str, ...], greps: tuple[str, ...], props: tuple[tuple[str, str], ...],
           limit: int, no_body: bool) -> None:
    """Stream the messages of TOPIC (all topics if omitted) in a store-time window, optionally
    filtered by tag, key, body text or property; read-only.

    Messages come in commitlog (write) order, one per line; nothing is held in memory, so there
    is no result cap. --json prints JSON Lines (one message object per line). A damaged record is
    skipped with a warning on stderr.
    """
    flt = _BrowseFilter(begin if begin is not None else -(2**63), end if end is not None else MAX_TIME,
                        frozenset(keys), tuple(g.encode("utf-8") for g in greps), tuple(props))
    with cmd.open_read() as st:
        spans = _browse_spans(st, topic, queues, begin, end)
        total = sum(sp.stop - sp.start for sp in spans)
        skipped: list[str] = []

        def corrupt(t: str, q: int):
            def report(k) -> None:
                skipped.append(f"{t}:{q}:{k.queue_offset}")
                cmd.out.warn(f"skipped {t}:{q}:{k.queue_offset} (commitlog offset {k.phy_offset}): {k.reason}")
            return report

        streams = [iter_queue(st, sp, subscription, on_skipped=corrupt(sp.topic, sp.queue_id)) for sp in spans]
        matched = scanned = 0
        with cmd.out.progress("browsing", total) as bar:
            for rec in heapq.merge(*streams, key=lambda r: r.phy_offset):
                scanned += 1
                bar.advance(1)
                if not flt.matches(rec):
                    continue
                matched += 1
                if cmd.json:
                    cmd.out.emit_line(record_dict(rec, include_body=not no_body))
                else:
                    cmd.out.print(_line(rec), soft_wrap=True)
                if limit and matched >= limit:
                    break
        if not cmd.json:
            note = f", {len(skipped)} damaged records skipped" if skipped else ""
            cmd.out.print(Text(f"{matched} messages matched, {scanned} read{note} ({tz_note()})", style="dim"))


# ---------------------------------------------------------------------------------------------
# topic-status / offset-by-time
# ---------------------------------------------------------------------------------------------
@click.command("topic-status")
@click.argument("topic", required=False)
@store_options
def topic_status(cmd: StoreCommand, topic: str | None) -> None:
    """Min/max offset, message count and last store time per queue of TOPIC (all topics if omitted); read-only."""
    with cmd.open_read() as st:
        topics = known_topics(st)
        names = [topic] if topic is not None else sorted(topics)
        if topic is not None:
            require_topic(st, topic)
        rows = []
        for t in names:
            for q in topics[t]:
                lo, hi = st.get_min_offset_in_queue(t, q), st.get_max_offset_in_queue(t, q)
                last = st.get_message_store_timestamp(t, q, hi - 1) if hi > lo else -1
                rows.append({"topic": t, "queue_id": q, "min_offset": lo, "max_offset": hi,
                             "messages": hi - lo, "last_store_timestamp": last})
    if cmd.json:
        cmd.out.emit({"store": st.path, "queues": rows})
        return
    tb = Table(title=f"topic status of {st.path}", caption=tz_note())
    for c in ("topic", "queue", "min offset", "max offset", "messages", "last store time"):
        tb.add_column(c, justify="left" if c in ("topic", "last store time") else "right",
                      min_width=TIME_MIN_WIDTH if "time" in c else None)
    for r in rows:
        tb.add_row(escape(r["topic"]), str(r["queue_id"]), str(r["min_offset"]), str(r["max_offset"]),
                   str(r["messages"]), fmt_ts(r["last_store_timestamp"]))
    cmd.out.print(tb)


#: upstream's prefix of the broker's own consumer groups (MixAll.CID_RMQ_SYS_PREFIX, isSysConsumerGroup)
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"


def is_system_group(group: str) -> bool:
    return group.startswith(SYSTEM_GROUP_PREFIX)


@click.command("consumer-progress")
@click.argument("group", required=False)
@store_options
def consumer_progress(cmd: StoreCommand, group: str | None) -> None:
    """Committed offset, max offset, lag and last store time per queue of each consumer group (GROUP only if given),
    from the store's config/consumerOffset.json; read-only.

    Works on a RocketMQ broker's store too (its file, fastjson form included). Lag is the queue's
    max offset minus the committed one; a committed offset below the queue's min offset (retention
    deleted those messages) counts from the min offset. The broker's own groups (CID_RMQ_SYS_*)
    are listed after the applications' groups and marked as system groups.
    """
    with cmd.open_read() as st:
        table = st.consumer_offsets.table()
        groups = sorted({g for _, g in table}, key=lambda g: (is_system_group(g), g))
        if group is not None and group not in groups:
            known = ", ".join(groups[:10]) + (", ..." if len(groups) > 10 else "") if groups else "none"
            raise UnknownTopicError(f"no committed offsets for consumer group {group!r} in {st.path} "
                                    f"(groups with offsets: {known})",
                                    hint="`rmqstore consumer-progress` without GROUP lists every group with "
                                         "committed offsets")
        rows = _progress_rows(st, table, group)
    if cmd.json:
        cmd.out.emit({"store": st.path, "queues": rows, "total_lag": sum(r["lag"] for r in rows)})
        return
    if not rows:
        cmd.out.print(Text(f"no consumer group has committed offsets in {st.path} (config/consumerOffset.json is "
                           "missing or empty). Offsets are committed by consumers: RocketMQ clients through "
                           "`rmqstore serve` (or a broker), or the embedded consumer's commit()."))
        return
    tb = Table(title=f"consumer progress in {st.path}",
               caption=tz_note() + ("; (system): the broker's own groups, CID_RMQ_SYS_*"
                                    if any(r["system"] for r in rows) else ""))
    for c in ("group", "topic", "queue", "committed", "max offset", "lag", "last store time"):
        tb.add_column(c, justify="left" if c in ("group", "topic", "last store time") else "right",
                      min_width=TIME_MIN_WIDTH if "time" in c else None)
    for r in rows:
        sys_group = r["system"]
        tb.add_row(escape(r["group"]) + (" [dim](system)[/]" if sys_group else ""), escape(r["topic"]),
                   str(r["queue_id"]), str(r["committed_offset"]), str(r["max_offset"]), str(r["lag"]),
                   fmt_ts(r["last_store_timestamp"]), style="dim" if sys_group else None)
    cmd.out.print(tb)


def _progress_rows(st, table: dict, group: str | None) -> list[dict]:
    """One row per committed queue offset (of ``group`` only, if given): the applications' groups
    first, then the system groups."""
    topics = known_topics(st)
    rows = []
    for (topic, g), queues in sorted(table.items(), key=lambda kv: (is_system_group(kv[0][1]), kv[0])):
        if group is not None and g != group:
            continue
        for q, committed in sorted(queues.items()):
            if q in topics.get(topic, ()):
                lo, hi = st.get_min_offset_in_queue(topic, q), st.get_max_offset_in_queue(topic, q)
                last = st.get_message_store_timestamp(topic, q, hi - 1) if hi > lo else -1
            else:
                lo = hi = last = -1
            lag = max(0, hi - max(committed, lo)) if hi >= 0 else 0
            rows.append({"group": g, "system": is_system_group(g), "topic": topic, "queue_id": q,
                         "committed_offset": committed, "max_offset": hi, "lag": lag, "last_store_timestamp": last})
    return rows


@click.command("offset-by-time")
@click.argument("topic")
@click.argument("timestamp", type=TIME)
@click.option("--queue", "-q", "queues", type=click.IntRange(0), multiple=True, help="Only these queues (default: all).")
@click.option("--boundary", type=click.Choice(["lower", "upper"]), default="lower", show_default=True,
              help="lower: first offset stored at or after TIMESTAMP; upper: last one stored at or before it.")
@store_options
def offset_by_time(cmd: StoreCommand, topic: str, timestamp: int, queues: tuple[int, ...], boundary: str) -> None:
    """The queue offset at a store time (getOffsetInQueueByTime), per queue of TOPIC; read-only.

    TIMESTAMP is epoch milliseconds or an ISO time. Answers are clamped to [min, max] as the
    broker does, so max means "nothing stored that late".
    """
    with cmd.open_read() as st:
        all_q = require_topic(st, topic)
        for q in queues:
            require_topic(st, topic, q)
        rows = []
        for q in (sorted(queues) if queues else all_q):
            off = st.get_offset_in_queue_by_time(topic, q, timestamp, boundary)
            hi = st.get_max_offset_in_queue(topic, q)
            rows.append({"queue_id": q, "offset": off, "min_offset": st.get_min_offset_in_queue(topic, q),
                         "max_offset": hi,
                         "store_timestamp": st.get_message_store_timestamp(topic, q, off) if off < hi else -1})
    if cmd.json:
        cmd.out.emit({"topic": topic, "timestamp": timestamp, "boundary": boundary, "queues": rows})
        return
    tb = Table(title=f"{topic}: {boundary} offset at {fmt_ts(timestamp)}", caption=tz_note())
    for c in ("queue", "offset", "min offset", "max offset", "store time at offset"):
        tb.add_column(c, justify="left" if c.startswith("store") else "right",
                      min_width=TIME_MIN_WIDTH if "time" in c else None)
    for r in rows:
        tb.add_row(str(r["queue_id"]), str(r["offset"]), str(r["min_offset"]), str(r["max_offset"]),
                   fmt_ts(r["store_timestamp"]))
    cmd.out.print(tb)


@click.command()
@click.argument("out", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--format", "fmt", type=click.Choice(["parquet", "jsonl", "csv"]), required=True,
              help="parquet (the Spark source's columns), jsonl (message objects `rmqstore load` reads back) or csv.")
@click.option("--topic", "topics", multiple=True, help="Only this topic (repeatable).")
@click.option("--begin", type=TIME, default=None, help="Earliest store time: epoch ms or ISO time.")
@click.option("--end", type=TIME, default=None, help="Store times before this: epoch ms or ISO time.")
@click.option("--no-body", is_flag=True, help="Leave bodies out.")
@click.option("--force", is_flag=True, help="Overwrite OUT when it exists (never a file inside a store directory).")
@store_options
def export(cmd: StoreCommand, out: str, fmt: str, topics: tuple[str, ...], begin: int | None, end: int | None,
           no_body: bool, force: bool) -> None:
    """Export messages to Parquet, JSON Lines or CSV, without Spark.

    Output goes to OUT ('-' = stdout for jsonl and csv), made in this process, streaming: memory
    stays about one batch of records whatever the store's size. The store is only read."""
    import os

    from ..export import export as run_export

    from ..export import check_export_output
    from ..errors import OutputExistsError

    if out != "-" and os.path.isfile(out) and not force:
        raise UsageProblem(f"{out} exists", hint="give another OUT, or --force to overwrite it")
    try:
        check_export_output(out, force)
    except OutputExistsError as e:
        raise UsageProblem(str(e), hint="give OUT a path outside any store directory") from None
    if out == "-" and fmt == "parquet":
        raise UsageProblem("parquet needs a file", hint="give OUT a path")
    import importlib.util

    if importlib.util.find_spec("pyarrow") is None:
        raise UsageProblem("export needs pyarrow", hint="pip install 'rmqstore[spark]'")
    with cmd.out.status(f"exporting {cmd.store_path}"):
        r = run_export(cmd.store_path, out, fmt, topics=set(topics) or None, begin_ms=begin, end_ms=end,
                       include_body=not no_body, cfg=cmd.config(), overwrite=force)
    d = dataclasses.asdict(r)
    d["seconds"] = round(r.seconds, 3)
    d["mb_per_s"] = round(r.commitlog_bytes / r.seconds / 1e6, 1) if r.seconds > 0 else None
    if out == "-":
        return
    if cmd.json:
        cmd.out.emit(d)
    else:
        from .render import kv_table

        cmd.out.print(kv_table(f"exported {r.messages:,} messages to {out}", list(d.items())))


COMMANDS = [export, pull, query_key, query_unique_key, query_id, query_offset, print_, browse, topic_status, consumer_progress,
            offset_by_time]  # the lookups are commands_query's
