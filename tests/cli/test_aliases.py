"""mqadmin's command names run the matching rmqstore command with mqadmin's option letters: each
alias prints what its command prints, and none is listed in `rmqstore --help`."""
from __future__ import annotations

import json

import pytest

from rmqstore.cli.aliases import ALIASES
from rmqstore.cli.main import cli

T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from click.testing import CliRunner

    tmp = tmp_path_factory.mktemp("aliases")
    rows = [{"topic": "Orders", "body": f"m{i}", "queue_id": i % 2, "keys": [f"k{i % 3}"], "tags": f"Tag{i % 2}",
             "uniq_key": f"C0A80A0B1F404E6F7A2100000F44{i:04X}", "store_timestamp": T0 + 1000 * i} for i in range(8)]
    (tmp / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp / "store"
    r = CliRunner().invoke(cli, ["load", str(tmp / "m.jsonl"), "--store", str(path), "--create"])
    assert r.exit_code == 0, r.output
    from rmqstore import MessageStore

    with MessageStore.open(path) as st:
        st.consumer_offsets.commit_offset("billing", "Orders", 0, 3)
        st.consumer_offsets.commit_offset("billing", "Orders", 1, 1)
        msg_id = st.get_message("x", "Orders", 0, 1, 1).messages[0].msg_id
    return path, msg_id


def cases(msg_id):
    """alias argv -> the command's argv (both read-only or --dry-run)."""
    return [
        (["queryMsgByKey", "-t", "Orders", "-k", "k1", "-b", T0 + 2000, "-m", 5],
         ["query-key", "Orders", "k1", "--begin", T0 + 2000, "--max", 5]),
        (["queryMsgByKey", "-t", "Orders", "-k", "k2", "-e", "2023-11-14#22:13:25:000"],
         ["query-key", "Orders", "k2", "--end", "2023-11-14T22:13:25"]),
        (["queryMsgById", "-i", msg_id, "-t", "Orders"], ["query-id", msg_id]),
        (["queryMsgByUniqueKey", "-t", "Orders", "-i", "C0A80A0B1F404E6F7A2100000F440003"],
         ["query-unique-key", "Orders", "C0A80A0B1F404E6F7A2100000F440003"]),
        (["queryMsgByOffset", "-t", "Orders", "-i", 1, "-o", 2], ["print", "Orders:1:2"]),
        (["printMsg", "-t", "Orders", "-s", "Tag1", "-b", T0 + 1000], ["browse", "Orders", "--tags", "Tag1",
                                                                      "--begin", T0 + 1000]),
        (["printMsgByQueue", "-t", "Orders", "-i", 0, "-e", T0 + 4000], ["browse", "Orders", "--queue", 0,
                                                                        "--end", T0 + 4000]),
        (["topicList"], ["topic-status"]),
        (["topicStatus", "-t", "Orders"], ["topic-status", "Orders"]),
        (["consumerProgress", "-g", "billing"], ["consumer-progress", "billing"]),
        (["consumerProgress"], ["consumer-progress"]),
        (["resetOffsetByTime", "-g", "billing", "-t", "Orders", "-s", T0 + 3500, "--dry-run"],
         ["reset-offset", "billing", "Orders", "--timestamp", T0 + 3500, "--dry-run"]),
        (["resetOffsetByTime", "-g", "billing", "-t", "Orders", "-q", 1, "-o", 2, "--dry-run"],
         ["reset-offset", "billing", "Orders", "--queue", 1, "--offset", 2, "--dry-run"]),
    ]


def test_each_alias_prints_what_its_command_prints(run, store):
    path, msg_id = store
    seen = set()
    for alias, command in cases(msg_id):
        a = run.ok(*alias, "--store", path, "--json").stdout
        c = run.ok(*command, "--store", path, "--json").stdout
        assert a == c, f"{alias} != {command}"
        assert a.strip() and a.strip() not in ("[]", "{}")
        seen.add(alias[0])
        # the tables too (without --json)
        assert run.ok(*alias, "--store", path).stdout == run.ok(*command, "--store", path).stdout
    assert seen == {a.name for a in ALIASES}  # every alias is covered


def test_alias_errors_are_the_commands_errors(run, store):
    path, _ = store
    a = run.fails(10, "topicStatus", "-t", "Nope", "--store", path)
    c = run.fails(10, "topic-status", "Nope", "--store", path)
    assert a.stderr == c.stderr
    run.fails(2, "queryMsgByKey", "-t", "Orders", "--store", path)  # -k is required, as in mqadmin


def test_aliases_are_not_listed_but_have_help(run):
    listing = run.ok("--help").stdout
    for a in ALIASES:
        assert a.name not in listing
        h = run.ok(a.name, "--help").stdout
        assert f"runs `rmqstore {a.target}`" in " ".join(h.split())
