"""Every command has --help text and a CLI-reference entry with an example; the exit-code table
and the documented --json shapes match what the commands do."""
from __future__ import annotations

import json
import re

import click
import pytest

from rmqstore.cli.errors import EXIT_CODE_DOCS, ExitCode
from rmqstore.cli.main import cli

WRITERS = {"send", "load", "recover", "clean", "demo", "rebuild", "spark rebuild", "spark export", "serve", "reset-offset"}
#: commands without a store (no --store/--config), and the page their example lives on until the
#: CLI reference (README, moving to docs/cli.md) has their section
STORELESS = {"namesrv": "docs/cluster.md"}


def all_commands(group: click.Group = cli, prefix: str = ""):
    for name, cmd in sorted(group.commands.items()):
        path = f"{prefix}{name}"
        yield path, cmd
        if isinstance(cmd, click.Group):
            yield from all_commands(cmd, path + " ")


COMMANDS = list(all_commands())
LEAVES = [(p, c) for p, c in COMMANDS if not isinstance(c, click.Group)]


def test_the_contract_command_names_exist():
    names = {p for p, _ in COMMANDS}
    assert {"demo", "send", "load", "pull", "query-key", "query-id", "query-unique-key", "query-offset", "browse",
            "topic-status", "offset-by-time", "print", "stats", "verify", "recover", "clean", "rebuild", "spark",
            "spark rebuild", "spark verify", "spark export", "spark stats"} <= names


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=[p for p, _ in COMMANDS])
def test_every_command_has_help(run, path, cmd):
    assert (cmd.help or "").strip(), f"{path} has no help text"
    r = run.ok(*path.split(), "--help")
    assert f"Usage: cli {path}" in r.stdout or f"Usage: rmqstore {path}" in r.stdout
    first = cmd.help.strip().split("\n")[0].split()[0]
    assert first in r.stdout
    short = cmd.get_short_help_str(limit=200)
    assert short and short in run.ok(*path.split()[:-1], "--help").stdout.replace("\n" + " " * 20, " ")
    if path in WRITERS - {"rebuild", "spark rebuild", "spark export"}:
        assert "writes" in short.lower(), path
    if not isinstance(cmd, click.Group):
        opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
        # the demo takes --dir, its own directory, never --store (a store is not the demo's to empty)
        want = {"--json", "--debug"} if path in STORELESS else {"--dir" if path == "demo" else "--store", "--config",
                                                                 "--json", "--debug"}
        assert want <= opts, path
        assert path != "demo" or "--store" not in opts
        says_writes = "WRITES" in cmd.help or "writes" in cmd.help.lower()
        assert says_writes == (path in WRITERS) or path == "verify", path
    if path == "verify":
        fix = next(p for p in cmd.params if "--fix" in p.opts)
        assert "WRITES" in fix.help


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=[p for p, _ in COMMANDS])
def test_every_command_is_in_the_reference_with_an_example(docref, path):
    sec = docref.sections()
    if path in STORELESS and path not in sec:
        from pathlib import Path
        page = (Path(__file__).resolve().parents[2] / STORELESS[path]).read_text(encoding="utf-8")
        sec = {path: page}
    assert path in sec, f"no '### `rmqstore {path}`' section in the CLI reference"
    if path == "spark":
        return
    blocks = re.findall(r"```[a-z]*\n(.*?)```", sec[path], flags=re.S)
    examples = [line for b in blocks for line in b.splitlines() if line.startswith(f"rmqstore {path} ")]
    assert examples, f"no example `rmqstore {path} ...` in its section"


def test_every_exit_code_is_documented_and_the_reference_links_the_table(docref):
    """The table itself is generated from EXIT_CODE_DOCS when the docs are built (docs/hooks.py;
    tests/docs/test_site.py checks the built page)."""
    assert {c for c, _, _ in EXIT_CODE_DOCS} == set(ExitCode)
    assert all(meaning.strip() and fix.strip() for _, meaning, fix in EXIT_CODE_DOCS)
    assert "(exit-codes.md)" in docref.reference_text()


def test_documented_json_shapes_are_what_commands_print(run, truth, tmp_path, docref):
    t = truth("basic")
    s = t.store
    r = t.rows[4]
    record_doc = json.loads(re.search(r"## The message object.*?```json\n(.*?)```", docref.reference_text(),
                                      flags=re.S).group(1))
    store = tmp_path / "w"
    conf = tmp_path / "c.conf"
    conf.write_text("mappedFileSizeCommitLog=65536\n")
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text(json.dumps({"topic": "T", "body": "x"}) + "\n")
    produced = {
        "send": run.json("send", "T", "x", "--create", "--store", store),
        "load": run.json("load", jsonl, "--store", store),
        "pull": run.json("pull", r["topic"], "-q", r["queue_id"], "--store", s),
        "query-key": run.json("query-key", r["topic"], "order-4", "--store", s),
        "query-unique-key": run.json("query-unique-key", r["topic"], r["uniq_key"], "--store", s),
        "topic-status": run.json("topic-status", "--store", s),
        "offset-by-time": run.json("offset-by-time", r["topic"], r["store_ts"], "--store", s),
        "stats": run.json("stats", "--store", s),
        "recover": run.json("recover", "--dry-run", "--store", s),
        "rebuild": run.json("rebuild", tmp_path / "rb", "--store", s),
        "clean": run.json("clean", "--dry-run", "--force", "--now", "2100-01-01T00:00:00Z", "--store", s),
    }
    r_verify = run("verify", "--json", "--store", store)  # findings: none here, so give the shape one
    produced["verify"] = json.loads(r_verify.stdout)
    if not produced["verify"]["findings"]:
        produced["verify"]["findings"] = [{"kind": "", "path": "", "offset": 0, "detail": "", "fixed": False}]
    for path, got in produced.items():
        doc = docref.doc_json(path)
        assert doc is not None, f"no ```json block in the {path} section"
        docref.same_shape(doc, got, path)
        for m in got["messages"] if isinstance(got.get("messages"), list) else []:
            docref.same_shape(record_doc, m, f"{path}.messages[]")
    for cmd in (["print", r["phy"]], ["query-id", r["msg_id"]], ["query-offset", r["phy"]]):
        docref.same_shape(record_doc, run.json(*cmd, "--store", s), cmd[0])
    line = run.json_lines("browse", r["topic"], "--limit", 1, "--store", s)[0]
    docref.same_shape(record_doc, line, "browse")
    no_body = run.json_lines("browse", r["topic"], "--limit", 1, "--no-body", "--store", s)[0]
    assert set(record_doc) - set(no_body) == {"body", "body_encoding"}
