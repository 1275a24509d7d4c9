"""Reading commands that fetch given messages: pull a queue, by key, by unique key, by msgId, by
commitlog offset. Each opens the store read-only (see :mod:`.commands_read`)."""
from __future__ import annotations

import dataclasses
import re

import click
from rich.text import Text

from .common import TIME, StoreCommand, store_options
from .errors import MessageNotFoundError, UsageProblem
from .read_common import (CLI_GROUP, CONTINUE, MAX_TIME, check_msg_id, detail_out, known_topics, raise_if_damaged,
                          read_at, records_out, require_topic)


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
            if single or len(msgs) >= count or g.status.value not in CONTINUE \
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
        records_out(cmd, header, msgs, title, include_body=not no_body)
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
        records_out(cmd, header, res.messages, f"{topic} key {key!r}: {len(res.messages)} messages{more}",
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
        records_out(cmd, header, res.messages, f"{topic} unique key {unique_key}: {len(res.messages)} messages",
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
                detail_out(cmd, rec, body_as)
                return
        found = _by_unique_key(st, mid) if len(mid) == 32 else []
        if len(found) == 1:
            cmd.out.warn(f"{mid} is not an offsetMsgId of this store; found as a client msgId (UNIQ_KEY) "
                         f"in topic {found[0].topic}")
            detail_out(cmd, found[0], body_as)
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
        detail_out(cmd, read_at(st, phy_offset), body_as)


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
        detail_out(cmd, rec, body_as)
