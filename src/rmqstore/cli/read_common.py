"""Helpers shared by the read commands (:mod:`.commands_read`, :mod:`.commands_query`) and stats."""
from __future__ import annotations

import re

from rich.text import Text

from .common import StoreCommand
from .errors import CliError, ExitCode, UnknownTopicError, UsageProblem
from .render import record_detail, record_dict, records_table, shown_body, tz_note

CLI_GROUP = "rmqstore-cli"
MAX_TIME = 2**63 - 1
#: getMessage statuses after which a pull goes on from the next begin offset
CONTINUE = frozenset({"FOUND", "NO_MATCHED_MESSAGE", "OFFSET_FOUND_NULL", "MESSAGE_WAS_REMOVING"})


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


def check_msg_id(msg_id: str) -> str:
    s = msg_id.strip()
    if len(s) not in (32, 56) or not re.fullmatch(r"[0-9A-Fa-f]+", s):
        raise UsageProblem(f"{msg_id!r} is not an offsetMsgId (32 hex chars for IPv4 stores, 56 for IPv6)",
                           hint="use the msg id printed by send/pull/query-key, not the UNIQ_KEY "
                                "(for that: query-unique-key)")
    return s.upper()


def records_out(cmd: StoreCommand, header: dict, records: list, title: str, include_body: bool = True) -> None:
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


def detail_out(cmd: StoreCommand, rec, body_as: str = "auto") -> None:
    if cmd.json:
        d = record_dict(rec, stored_body=body_as == "stored")
        if body_as in ("hex", "stored"):
            d["body_encoding"], d["body"] = "hex", shown_body(rec, body_as == "stored")[0].hex()
        cmd.out.emit(d)
    else:
        record_detail(cmd.out, rec, body_as=body_as)
