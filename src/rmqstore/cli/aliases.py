"""mqadmin's camelCase command names as aliases of the commands that do the same offline.

``rmqstore queryMsgByKey -t TopicTest -k order-1 --store store`` runs ``rmqstore query-key TopicTest
order-1 --store store``: each alias takes mqadmin's option letters for what maps cleanly and hands
the command line to its command, which parses it as its own (every other option of the command,
``--store``, ``--json``, ... passes through). Aliases are left out of ``rmqstore --help`` (the
group resolves them without listing them); the docs' table lists them (:data:`ALIASES`).
mqadmin options that name a broker, cluster or client (``-b`` broker address, ``-c`` cluster,
``-d`` client id) have no offline meaning and are not taken.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import click

from .commands_offsets import ResetTimeParam

MQADMIN_TIME = ResetTimeParam()


@dataclass(frozen=True)
class Alias:
    """``name`` runs ``target``; ``options`` are mqadmin's (letter, long name, required, type, help);
    ``argv(values)`` the target's arguments from their values."""

    name: str
    target: str
    options: tuple[tuple[str, str, bool, object, str], ...]
    argv: Callable[[dict], list[str]]


def _opt(flag: str, value) -> list[str]:
    return [] if value is None else [flag, str(value)]


ALIASES: tuple[Alias, ...] = (
    Alias("queryMsgByKey", "query-key",
          (("t", "topic", True, str, "Topic name."), ("k", "msgKey", True, str, "Message key."),
           ("b", "beginTimestamp", False, MQADMIN_TIME, "Earliest store time."),
           ("e", "endTimestamp", False, MQADMIN_TIME, "Latest store time."),
           ("m", "maxNum", False, click.IntRange(1), "Messages to return at most.")),
          lambda v: [v["topic"], v["msgKey"], *_opt("--begin", v["beginTimestamp"]), *_opt("--end", v["endTimestamp"]),
                     *_opt("--max", v["maxNum"])]),
    Alias("queryMsgById", "query-id",
          (("i", "msgId", True, str, "The offsetMsgId (or a client msgId)."),
           ("t", "topic", False, str, "Topic name (not needed offline: the id names the record).")),
          lambda v: [v["msgId"]]),
    Alias("queryMsgByUniqueKey", "query-unique-key",
          (("i", "msgId", True, str, "The client msgId (UNIQ_KEY)."), ("t", "topic", True, str, "Topic name.")),
          lambda v: [v["topic"], v["msgId"]]),
    Alias("queryMsgByOffset", "print",
          (("t", "topic", True, str, "Topic name."), ("i", "queueId", True, click.IntRange(0), "Queue id."),
           ("o", "offset", True, click.IntRange(0), "Queue offset.")),
          lambda v: [f"{v['topic']}:{v['queueId']}:{v['offset']}"]),
    Alias("printMsg", "browse",
          (("t", "topic", True, str, "Topic name."), ("s", "subExpression", False, str, "Tag expression."),
           ("b", "beginTimestamp", False, MQADMIN_TIME, "Earliest store time."),
           ("e", "endTimestamp", False, MQADMIN_TIME, "Latest store time.")),
          lambda v: [v["topic"], *_opt("--tags", v["subExpression"]), *_opt("--begin", v["beginTimestamp"]),
                     *_opt("--end", v["endTimestamp"])]),
    Alias("printMsgByQueue", "browse",
          (("t", "topic", True, str, "Topic name."), ("i", "queueId", True, click.IntRange(0), "Queue id."),
           ("s", "subExpression", False, str, "Tag expression."),
           ("b", "beginTimestamp", False, MQADMIN_TIME, "Earliest store time."),
           ("e", "endTimestamp", False, MQADMIN_TIME, "Latest store time.")),
          lambda v: [v["topic"], "--queue", str(v["queueId"]), *_opt("--tags", v["subExpression"]),
                     *_opt("--begin", v["beginTimestamp"]), *_opt("--end", v["endTimestamp"])]),
    Alias("topicList", "topic-status", (), lambda v: []),
    Alias("topicStatus", "topic-status", (("t", "topic", True, str, "Topic name."),), lambda v: [v["topic"]]),
    Alias("consumerProgress", "consumer-progress",
          (("g", "groupName", False, str, "Consumer group (default: every group)."),),
          lambda v: [v["groupName"]] if v["groupName"] is not None else []),
    Alias("resetOffsetByTime", "reset-offset",
          (("g", "group", True, str, "Consumer group."), ("t", "topic", True, str, "Topic name."),
           ("s", "timestamp", False, MQADMIN_TIME, "now, epoch ms, yyyy-MM-dd#HH:mm:ss:SSS or an ISO time."),
           ("q", "queue", False, click.IntRange(0), "Only this queue."),
           ("o", "offset", False, click.IntRange(0), "Move to this queue offset instead.")),
          lambda v: [v["group"], v["topic"], *_opt("--timestamp", v["timestamp"]), *_opt("--queue", v["queue"]),
                     *_opt("--offset", v["offset"])]),
)


def alias_command(alias: Alias, group: click.Group) -> click.Command:
    """A command named ``alias.name`` taking mqadmin's options, that runs the group's ``alias.target``
    with the arguments they map to and every other argument given."""
    def run(**values) -> None:
        ctx = click.get_current_context()
        target = group.commands[alias.target]
        args = alias.argv(values) + list(ctx.args)
        with target.make_context(alias.target, args, parent=ctx.parent) as sub:
            target.invoke(sub)

    params = [click.Option([f"-{letter}", f"--{long}", long], required=required, type=kind, help=text)
              for letter, long, required, kind, text in alias.options]
    return click.Command(alias.name, callback=run, params=params, add_help_option=True,
                         context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
                         help=f"mqadmin's {alias.name}, offline: runs `rmqstore {alias.target}` (its options, "
                              f"--store, --json, ... pass through).")


def alias_table() -> list[tuple[str, str, str]]:
    """(mqadmin name, rmqstore command, options taken) for the docs."""
    return [(a.name, a.target, " ".join(f"-{o[0]}" for o in a.options)) for a in ALIASES]
