"""Reading commands. Each opens the store read-only: no lock is taken and no byte on disk changes,
so they are safe on a store a broker is still running on (they see what was flushed)."""
from __future__ import annotations

import dataclasses
import heapq
import re
from typing import Iterator

import click
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .common import KEY_VALUE, TIME, StoreCommand, store_options
from .errors import CliError, ExitCode, MessageNotFoundError, UnknownTopicError, UsageProblem
from .render import (TIME_MIN_WIDTH, body_preview, fmt_ts, record_detail, record_dict, records_table, shown_body,
                     tz_note)

CLI_GROUP = "rmqstore-cli"
MAX_TIME = 2**63 - 1
_CONTINUE = {"FOUND", "NO_MATCHED_MESSAGE", "OFFSET_FOUND_NULL", "MESSAGE_WAS_REMOVING"}


# ---------------------------------------------------------------------------------------------
# helpers shared by the read commands (and stats)
# ---------------------------------------------------------------------------------------------
def known_topics(store) -> dict[str, list[int]]:
    return store.topics()


def require_topic(store, topic: str, queue: int | None = None) -> list[int]:
    """The topic's queue ids; :class:`UnknownTopicError` when the topic (or queue) is not stored."""
    topics = known_topics(store)
    if topic not in topics:
        names = sorted(topics)
        listed = ", ".join(names[:20]) + (f", ... ({len(names)} topics)" if len(names) > 20 else "")
        raise UnknownTopicError(f"unknown topic {topic!r} in {store.path} (topics: {listed or 'none'})")
    if queue is not None and queue not in topics[topic]:
        raise UnknownTopicError(f"topic {topic!r} has no queue {queue} in {store.path} "
                                f"(queues: {', '.join(map(str, topics[topic]))})")
    return topics[topic]


def iter_queue(store, topic: str, queue_id: int, start: int, stop: int, subscription: str | None = None,
               on_skipped=None) -> Iterator:
    """Messages of one queue with queue offsets in [start, stop), pulled page by page. A damaged
    message is stepped over by the pull itself; ``on_skipped(SkippedMessage)`` hears of each."""
    off = start
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
        keeps_going = g.status.value in _CONTINUE or g.status.value == "OFFSET_TOO_SMALL"  # (jump to min)
        if not keeps_going or nxt <= off:
            return
        off = nxt


def check_msg_id(msg_id: str) -> str:
    s = msg_id.strip()
    if len(s) not in (32, 56) or not re.fullmatch(r"[0-9A-Fa-f]+", s):
        raise UsageProblem(f"{msg_id!r} is not an offsetMsgId (32 hex chars for IPv4 stores, 56 for IPv6)",
                           hint="use the msg id printed by send/pull/query-key, not the UNIQ_KEY "
                                "(for that: query-unique-key)")
    return s.upper()


def _records_out(cmd: StoreCommand, header: dict, records: list, title: str, include_body: bool = True) -> None:
    if cmd.json:
        cmd.out.emit({**header, "messages": [record_dict(r, include_body=include_body) for r in records]})
    elif records:
        cmd.out.print(records_table(records, width=cmd.out.console.width, title=title, caption=tz_note()))
    else:
        cmd.out.print(Text(f"{title} (none)"))


def raise_if_damaged(st, what: str, phy_offset: int | None = None) -> None:
    """When a read-only open found a damaged commitlog tail (recovery would cut it) and the thing
    asked for lies there (or may: ``phy_offset`` None), say so instead of "not found"."""
    rep = st.recovery_report
    if rep is None:
        return
    for c in rep.corrupt_records:  # damaged bytes kept in place (never served)
        if phy_offset is not None and c.offset <= phy_offset < c.offset + max(c.length, 1):
            raise CliError(f"{what}: commitlog offset {phy_offset} lies in damaged bytes ({c.reason}; {c.length} "
                           f"bytes from offset {c.offset} in {c.segment}, path={st.path})", code=ExitCode.CORRUPT,
                           hint="`rmqstore verify` lists the damage; a damaged record can only come back from a copy")
    if rep.applied:
        return
    for c in rep.cuts:
        if phy_offset is None or c.offset <= phy_offset < c.offset + max(c.length, 1):
            raise CliError(f"{what}: it lies in the damaged commitlog tail that recovery would cut "
                           f"({c.reason}; {c.length} bytes from offset {c.offset} in {c.segment}, path={st.path})",
                           code=ExitCode.CORRUPT,
                           hint="`rmqstore verify` lists the damage; `rmqstore recover` cuts it and keeps the "
                                "bytes under recovery/")


def read_at(st, phy_offset: int):
    """The record starting at a commitlog offset, with errors that name the offset."""
    from ..errors import CorruptRecordError, OffsetError

    try:
        rec = st.look_message_by_offset(phy_offset)
    except CorruptRecordError as e:
        raise CliError(f"no valid record starts at commitlog offset {phy_offset}: {e}", code=ExitCode.CORRUPT,
                       hint="record start offsets are the phy offsets shown by pull/browse; if this one is "
                            "right, the store is damaged: run `rmqstore verify`") from e
    if rec is None:
        raise_if_damaged(st, f"no readable record at commitlog offset {phy_offset}", phy_offset)
        raise OffsetError(f"commitlog offset {phy_offset} is outside the stored data "
                          f"[{st.min_phy_offset}, {st.max_phy_offset})", path=st.path)
    return rec


def _detail_out(cmd: StoreCommand, rec, body_as: str = "auto") -> None:
    if cmd.json:
        d = record_dict(rec, stored_body=body_as == "stored")
        if body_as in ("hex", "stored"):
            d["body_encoding"], d["body"] = "hex", shown_body(rec, body_as == "stored")[0].hex()
        cmd.out.emit(d)
    else:
        record_detail(cmd.out, rec, body_as=body_as)


# ---------------------------------------------------------------------------------------------
# pull
# ---------------------------------------------------------------------------------------------
@click.command()
@click.argument("topic")
@click.option("--queue", "-q", "queue_id", type=click.IntRange(0), default=0, show_default=True, help="Queue id.")
@click.option("--offset", "-o", type=int, default=None, help="Queue offset to start at (default: the queue's min offset).")
@click.option("--count", "-n", type=click.IntRange(1), default=32, show_default=True, help="Messages to return at most.")
@click.option("--group", "-g", default=CLI_GROUP, show_default=True, help="Consumer group name (informational offline).")
@click.option("--tags", "subscription", default=None, metavar="EXPR", help='Tag expression, e.g. "TagA || TagB" ("*" = all).')
@click.option("--single", is_flag=True, help="Exactly one getMessage call, as a broker answers one pull request "
                                              "(it stops at a consume-queue file boundary).")
@click.option("--no-body", is_flag=True, help="Leave bodies out of --json output.")
@store_options
def pull(cmd: StoreCommand, topic: str, queue_id: int, offset: int | None, count: int, group: str,
         subscription: str | None, single: bool, no_body: bool) -> None:
    """Pull messages of one queue from an offset, like a consumer (getMessage), read-only.

    Repeats getMessage until COUNT messages are returned or the queue ends, unless --single.
    The status, next begin offset and min/max offsets are the broker's own answers.
    """
    with cmd.open_read() as st:
        require_topic(st, topic, queue_id)
        start = st.get_min_offset_in_queue(topic, queue_id) if offset is None else offset
        msgs: list = []
        skipped: list = []
        filtered = calls = 0
        off = start
        while True:
            g = st.get_message(group, topic, queue_id, off, count - len(msgs), subscription)
            calls += 1
            msgs.extend(g.messages)
            skipped.extend(g.skipped)
            filtered += g.filtered
            last = g
            if single or len(msgs) >= count or g.status.value not in _CONTINUE \
                    or g.next_begin_offset <= off or g.next_begin_offset >= g.max_offset:
                break
            off = g.next_begin_offset
        status = "FOUND" if msgs else last.status.value
        header = {"status": status, "topic": topic, "queue_id": queue_id, "group": group,
                  "subscription": subscription, "offset": start, "next_begin_offset": last.next_begin_offset,
                  "min_offset": last.min_offset, "max_offset": last.max_offset, "filtered": filtered,
                  "calls": calls, "skipped": [dataclasses.asdict(k) for k in skipped]}
        title = (f"pull {topic} queue {queue_id} from offset {start}: {status}, {len(msgs)} messages, "
                 f"next begin offset {last.next_begin_offset} (queue min {last.min_offset}, max {last.max_offset})")
        _records_out(cmd, header, msgs, title, include_body=not no_body)
        if not cmd.json:
            for k in skipped:
                cmd.out.print(Text(f"skipped queue offset {k.queue_offset} (commitlog offset {k.phy_offset}): {k.reason}"))


# ---------------------------------------------------------------------------------------------
# query-key / query-unique-key / query-id / query-offset / print
# ---------------------------------------------------------------------------------------------
@click.command("query-key")
@click.argument("topic")
@click.argument("key")
@click.option("--begin", type=TIME, default=None, help="Earliest store time: epoch ms or ISO time (local unless it has an offset).")
@click.option("--end", type=TIME, default=None, help="Latest store time: epoch ms or ISO time.")
@click.option("--max", "max_num", type=click.IntRange(1), default=32, show_default=True, help="Messages to return at most.")
@click.option("--upstream", is_flag=True, help="Answer as the broker's queryMessage does: index hash matches "
                                                "(collisions included), --max capped at maxMsgsNumBatch.")
@click.option("--no-body", is_flag=True, help="Leave bodies out of --json output.")
@store_options
def query_key(cmd: StoreCommand, topic: str, key: str, begin: int | None, end: int | None, max_num: int,
              upstream: bool, no_body: bool) -> None:
    """Messages of TOPIC whose KEYS (or UNIQ_KEY) contain KEY, oldest first, from the index; read-only."""
    b, e = begin if begin is not None else 0, end if end is not None else MAX_TIME
    with cmd.open_read() as st:
        res = st.query_message(topic, key, max_num=max_num, begin_ms=b, end_ms=e, exact=not upstream)
        if not res.messages:
            require_topic(st, topic)
        header = {"topic": topic, "key": key, "begin": b, "end": e, "max": max_num, "upstream": upstream,
                  "truncated": res.truncated}
        more = " (more match: raise --max)" if res.truncated else ""
        _records_out(cmd, header, res.messages, f"{topic} key {key!r}: {len(res.messages)} messages{more}",
                     include_body=not no_body)


@click.command("query-unique-key")
@click.argument("topic")
@click.argument("unique_key")
@click.option("--begin", type=TIME, default=None, help="Earliest store time: epoch ms or ISO time.")
@click.option("--end", type=TIME, default=None, help="Latest store time: epoch ms or ISO time.")
@click.option("--no-body", is_flag=True, help="Leave bodies out of --json output.")
@store_options
def query_unique_key(cmd: StoreCommand, topic: str, unique_key: str, begin: int | None, end: int | None,
                     no_body: bool) -> None:
    """Messages of TOPIC whose UNIQ_KEY (the client message id) is UNIQUE_KEY; read-only.

    Usually one message; a producer retry that was stored twice shows up twice.
    """
    b, e = begin if begin is not None else 0, end if end is not None else MAX_TIME
    with cmd.open_read() as st:
        res = st.query_message_by_unique_key(topic, unique_key, begin_ms=b, end_ms=e)
        if not res.messages:
            require_topic(st, topic)
        header = {"topic": topic, "unique_key": unique_key, "begin": b, "end": e, "truncated": res.truncated}
        _records_out(cmd, header, res.messages, f"{topic} unique key {unique_key}: {len(res.messages)} messages",
                     include_body=not no_body)


BODY_AS = click.option("--body-as", type=click.Choice(["auto", "text", "hex", "stored"]), default="auto",
                       show_default=True,
                       help="auto: text when the body is valid UTF-8, else a hex dump; a compressed body is shown "
                            "decoded; stored: the stored (compressed) bytes, in hex.")


@click.command("query-id")
@click.argument("msg_id")
@BODY_AS
@store_options
def query_id(cmd: StoreCommand, msg_id: str, body_as: str) -> None:
    """One message by its msgId; read-only. The broker's offsetMsgId (store host + commitlog offset)
    is tried first, then, as mqadmin does, the id as a client msgId (UNIQ_KEY) in every topic."""
    from ..format.msgid import decode_offset_msg_id

    mid = check_msg_id(msg_id)
    with cmd.open_read() as st:
        host, phy = decode_offset_msg_id(mid)
        if st.min_phy_offset <= phy < st.max_phy_offset and st.record_starts_at(phy):
            rec = st.view_message_by_id(mid)
            if rec is not None:
                if rec.store_host != host:
                    cmd.out.warn(f"msg id {mid} names store host {host}, this store writes {rec.store_host}: "
                                 "the message at that offset is shown, but the id may be another broker's")
                _detail_out(cmd, rec, body_as)
                return
        found = _by_unique_key(st, mid) if len(mid) == 32 else []
        if len(found) == 1:
            cmd.out.warn(f"{mid} is not an offsetMsgId of this store; found as a client msgId (UNIQ_KEY) "
                         f"in topic {found[0].topic}")
            _detail_out(cmd, found[0], body_as)
            return
        if len(found) > 1:
            raise UsageProblem(f"{mid} is the UNIQ_KEY of {len(found)} messages (topics "
                               f"{', '.join(sorted({r.topic for r in found}))})",
                               hint="use `rmqstore query-unique-key TOPIC KEY` to see them")
        raise_if_damaged(st, f"no readable message with msg id {mid}", phy)
        where = ("no record starts there" if st.min_phy_offset <= phy < st.max_phy_offset
                 else f"outside the stored data [{st.min_phy_offset}, {st.max_phy_offset})")
        raise MessageNotFoundError(f"no message at commitlog offset {phy} of {st.path} ({where}), and no message "
                                   f"with UNIQ_KEY {mid}",
                                   hint="it may have been cleaned, or be from another broker (its store host is "
                                        f"{host})")


def _by_unique_key(st, uniq_key: str) -> list:
    """Messages whose UNIQ_KEY is ``uniq_key``, in every topic (a client msgId names no topic)."""
    out = []
    for topic in known_topics(st):
        out += st.query_message_by_unique_key(topic, uniq_key).messages
    return out


@click.command("query-offset")
@click.argument("phy_offset", type=click.IntRange(0))
@BODY_AS
@store_options
def query_offset(cmd: StoreCommand, phy_offset: int, body_as: str) -> None:
    """The message that starts at a commitlog (physical) offset; read-only."""
    with cmd.open_read() as st:
        _detail_out(cmd, read_at(st, phy_offset), body_as)


def _parse_locator(locator: str) -> tuple[str, object]:
    s = locator.strip()
    if re.fullmatch(r"[0-9A-Fa-f]{32}|[0-9A-Fa-f]{56}", s):
        return "id", s.upper()
    if re.fullmatch(r"\d+", s):
        return "offset", int(s)
    parts = s.rsplit(":", 2)
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit() and parts[0]:
        return "queue", (parts[0], int(parts[1]), int(parts[2]))
    raise UsageProblem(f"{locator!r} is not a commitlog offset, an offsetMsgId or TOPIC:QUEUE:QUEUE_OFFSET",
                       hint="e.g. `rmqstore print 885`, `rmqstore print 0A00000100002A9F0000000000000375`, "
                            "`rmqstore print TopicTest:0:1`")


@click.command("print")
@click.argument("locator")
@BODY_AS
@store_options
def print_(cmd: StoreCommand, locator: str, body_as: str) -> None:
    """Every field of one message, body as text or hex; read-only.

    LOCATOR is a commitlog offset (885), an offsetMsgId (32/56 hex chars) or TOPIC:QUEUE:QUEUE_OFFSET
    (TopicTest:0:1).
    """
    from ..errors import CorruptRecordError

    kind, value = _parse_locator(locator)
    with cmd.open_read() as st:
        if kind == "id":
            rec = st.view_message_by_id(value)
            if rec is None:
                raise_if_damaged(st, f"no readable message with msg id {value}")
                raise MessageNotFoundError(f"no message with msg id {value} in {st.path}")
        elif kind == "offset":
            rec = read_at(st, value)
        else:
            topic, qid, qoff = value
            require_topic(st, topic, qid)
            g = st.get_message(CLI_GROUP, topic, qid, qoff, 1)
            rec = g.messages[0] if g.messages and g.messages[0].queue_offset == qoff else None
            damaged = next((k for k in g.skipped if k.queue_offset == qoff), None)
            if rec is None and damaged is not None:
                raise CorruptRecordError(f"the message at {topic} queue {qid} offset {qoff} is damaged: "
                                         f"{damaged.reason}")
            if rec is None:
                if g.max_offset <= qoff:
                    raise_if_damaged(st, f"no readable message at {topic} queue {qid} offset {qoff}")
                raise MessageNotFoundError(f"no message at {topic} queue {qid} offset {qoff} "
                                           f"({g.status.value}; the queue holds [{g.min_offset}, {g.max_offset}))")
        _detail_out(cmd, rec, body_as)


# ---------------------------------------------------------------------------------------------
# browse
# ---------------------------------------------------------------------------------------------
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
    needles = [g.encode("utf-8") for g in greps]
    want_keys = set(keys)
    with cmd.open_read() as st:
        if topic is not None:
            scope = [(topic, q) for q in require_topic(st, topic)]
        else:
            scope = [(t, q) for t, qs in sorted(known_topics(st).items()) for q in qs]
        if queues:
            if topic is not None:
                for q in queues:
                    require_topic(st, topic, q)
            scope = [(t, q) for t, q in scope if q in queues]
        ranges = []
        for t, q in scope:
            lo, hi = st.get_min_offset_in_queue(t, q), st.get_max_offset_in_queue(t, q)
            start = lo if begin is None else max(lo, st.get_offset_in_queue_by_time(t, q, begin, "lower"))
            stop = hi if end is None else min(hi, st.get_offset_in_queue_by_time(t, q, end, "upper") + 1)
            if start < stop:
                ranges.append((t, q, start, stop))
        b = begin if begin is not None else -(2**63)
        e = end if end is not None else MAX_TIME
        total = sum(stop - start for _, _, start, stop in ranges)
        skipped: list[str] = []

        def corrupt(t: str, q: int):
            def report(k) -> None:
                skipped.append(f"{t}:{q}:{k.queue_offset}")
                cmd.out.warn(f"skipped {t}:{q}:{k.queue_offset} (commitlog offset {k.phy_offset}): {k.reason}")
            return report

        streams = [iter_queue(st, t, q, start, stop, subscription, on_skipped=corrupt(t, q))
                   for t, q, start, stop in ranges]
        matched = scanned = 0
        with cmd.out.progress("browsing", total) as bar:
            for rec in heapq.merge(*streams, key=lambda r: r.phy_offset):
                scanned += 1
                bar.advance(1)
                if not (b <= rec.store_timestamp <= e):
                    continue
                if want_keys and want_keys.isdisjoint(rec.keys):
                    continue
                if needles and not all(n in bytes(rec.body) for n in needles):
                    continue
                if props and any(rec.properties.get(k) != v for k, v in props):
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


@click.command("consumer-progress")
@click.argument("group", required=False)
@store_options
def consumer_progress(cmd: StoreCommand, group: str | None) -> None:
    """Committed offset, max offset, lag and last store time per queue of each consumer group (GROUP only if given),
    from the store's config/consumerOffset.json; read-only.

    Works on a RocketMQ broker's store too (its file, fastjson form included). Lag is the queue's
    max offset minus the committed one; a committed offset below the queue's min offset (retention
    deleted those messages) counts from the min offset.
    """
    with cmd.open_read() as st:
        table = st.consumer_offsets.table()
        if group is not None and not any(g == group for _, g in table):
            raise UnknownTopicError(f"no committed offsets for consumer group {group!r} in {st.path}")
        topics = known_topics(st)
        rows = []
        for (topic, g), queues in sorted(table.items()):
            if group is not None and g != group:
                continue
            for q, committed in sorted(queues.items()):
                if q in topics.get(topic, ()):
                    lo, hi = st.get_min_offset_in_queue(topic, q), st.get_max_offset_in_queue(topic, q)
                    last = st.get_message_store_timestamp(topic, q, hi - 1) if hi > lo else -1
                else:
                    lo = hi = last = -1
                lag = max(0, hi - max(committed, lo)) if hi >= 0 else 0
                rows.append({"group": g, "topic": topic, "queue_id": q, "committed_offset": committed,
                             "max_offset": hi, "lag": lag, "last_store_timestamp": last})
    if cmd.json:
        cmd.out.emit({"store": st.path, "queues": rows, "total_lag": sum(r["lag"] for r in rows)})
        return
    tb = Table(title=f"consumer progress in {st.path}", caption=tz_note())
    for c in ("group", "topic", "queue", "committed", "max offset", "lag", "last store time"):
        tb.add_column(c, justify="left" if c in ("group", "topic", "last store time") else "right",
                      min_width=TIME_MIN_WIDTH if "time" in c else None)
    for r in rows:
        tb.add_row(escape(r["group"]), escape(r["topic"]), str(r["queue_id"]), str(r["committed_offset"]),
                   str(r["max_offset"]), str(r["lag"]), fmt_ts(r["last_store_timestamp"]))
    cmd.out.print(tb)


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
@click.option("--force", is_flag=True, help="Overwrite OUT when it exists.")
@store_options
def export(cmd: StoreCommand, out: str, fmt: str, topics: tuple[str, ...], begin: int | None, end: int | None,
           no_body: bool, force: bool) -> None:
    """Export messages to Parquet, JSON Lines or CSV, without Spark.

    Output goes to OUT ('-' = stdout for jsonl and csv), made in this process, streaming: memory
    stays about one batch of records whatever the store's size. The store is only read."""
    import os

    from ..export import export as run_export

    if out != "-" and os.path.exists(out) and not force:
        raise UsageProblem(f"{out} exists", hint="give another OUT, or --force to overwrite it")
    if out == "-" and fmt == "parquet":
        raise UsageProblem("parquet needs a file", hint="give OUT a path")
    import importlib.util

    if importlib.util.find_spec("pyarrow") is None:
        raise UsageProblem("export needs pyarrow", hint="pip install 'rmqstore[spark]'")
    with cmd.out.status(f"exporting {cmd.store_path}"):
        r = run_export(cmd.store_path, out, fmt, topics=set(topics) or None, begin_ms=begin, end_ms=end,
                       include_body=not no_body, cfg=cmd.config())
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
            offset_by_time]
