"""Each kind of failure: its own one-line message on stderr, its own exit code, no traceback
unless --debug."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from rmqstore import errors as E
from rmqstore.cli.errors import ExitCode, classify


def _one_line(r):
    """The error line (the store's own log lines, "store warning: ..." such as "recovery would cut
    ...", may come before it)."""
    lines = [line for line in r.stderr.splitlines() if line.strip() and not line.startswith("store ")]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


def test_missing_and_non_store_directories(run, tmp_path):
    line = _one_line(run.fails(ExitCode.STORE_NOT_FOUND, "topic-status", "--store", tmp_path / "nope"))
    assert str(tmp_path / "nope") in line and "--store" in line
    line = _one_line(run.fails(ExitCode.STORE_NOT_FOUND, "stats", "--store", tmp_path))
    assert "not a message store" in line and str(tmp_path) in line
    for cmd in (["pull", "T"], ["print", "0"], ["browse"], ["query-key", "T", "k"], ["verify"], ["rebuild", tmp_path / "o"],
                ["recover"], ["spark", "stats"]):
        run.fails(ExitCode.STORE_NOT_FOUND, *cmd, "--store", tmp_path / "nope")
    assert not (tmp_path / "nope").exists()


def test_store_from_env_and_broker_conf(run, vectors, tmp_path, monkeypatch):
    vs = vectors.load("basic")
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={vs.store}\n")
    via_conf = run.json("topic-status", "--config", conf)
    monkeypatch.setenv("RMQSTORE_STORE", str(vs.store))
    assert run.json("topic-status") == via_conf
    assert via_conf["store"] == str(vs.store)


def test_unknown_topic_or_queue(run, vectors):
    s = vectors.load("basic").store
    for cmd in (["pull", "NoSuchTopic"], ["pull", "TopicTest", "-q", 7], ["topic-status", "NoSuchTopic"],
                ["browse", "NoSuchTopic"], ["offset-by-time", "NoSuchTopic", "0"], ["stats", "--topic", "NoSuchTopic"],
                ["query-key", "NoSuchTopic", "order-1"], ["query-unique-key", "NoSuchTopic", "X"],
                ["print", "NoSuchTopic:0:0"], ["browse", "TopicTest", "-q", 9]):
        line = _one_line(run.fails(ExitCode.UNKNOWN_TOPIC, *cmd, "--store", s))
        assert "NoSuchTopic" in line or "queue" in line
        assert "TopicTest" in line  # says what there is


def _destroy_magic(store, phy):
    with open(store / "commitlog" / "00000000000000000000", "r+b") as fh:
        fh.seek(phy + 4)
        fh.write(b"\x00\x00\x00\x00")


def test_corrupt_record(run, copy_store, truth):
    t = truth("basic")
    store = copy_store("basic")
    # not a record start: the offset is named, and so is the way out
    line = _one_line(run.fails(ExitCode.CORRUPT, "query-offset", 1, "--store", store))
    assert "offset 1" in line and "verify" in line
    # a record whose magic code was destroyed
    victim = t.rows[4]
    _destroy_magic(store, victim["phy"])
    for cmd in (["print", str(victim["phy"])], ["query-id", victim["msg_id"]],
                ["print", f"{victim['topic']}:{victim['queue_id']}:{victim['queue_offset']}"]):
        r = run.fails(ExitCode.CORRUPT, *cmd, "--store", store)
        line = _one_line(r)
        assert str(victim["phy"]) in line and "verify" in line
        assert "store warning: " in r.stderr  # the read-only open says what recovery found


def test_browse_reads_around_a_damaged_record(run, copy_store, truth):
    t = truth("basic")
    store = copy_store("basic")
    victim = t.rows[4]
    _destroy_magic(store, victim["phy"])
    r = run("browse", victim["topic"], "--json", "--no-body", "--store", store)
    assert r.exit_code == 0, r.stderr
    got = [json.loads(line)["phy_offset"] for line in r.stdout.splitlines()]
    assert got == [x["phy"] for x in t.rows if x["topic"] == victim["topic"] and x is not victim]
    where = f"{victim['topic']}:{victim['queue_id']}:{victim['queue_offset']}"
    assert f"warning: skipped {where}" in r.stderr
    # a pull, like a consumer, steps over it: the good messages around it, then what it skipped
    got = run.json("pull", victim["topic"], "-q", victim["queue_id"], "--no-body", "--store", store)
    offs = [m["queue_offset"] for m in got["messages"]]
    want = [x["queue_offset"] for x in t.rows if x["topic"] == victim["topic"]
            and x["queue_id"] == victim["queue_id"] and x is not victim]
    assert offs == want and [k["queue_offset"] for k in got["skipped"]] == [victim["queue_offset"]]
    assert got["skipped"][0]["phy_offset"] == victim["phy"]
    table = run.ok("pull", victim["topic"], "-q", victim["queue_id"], "--store", store).stdout
    assert f"skipped queue offset {victim['queue_offset']} (commitlog offset {victim['phy']})" in table


def test_offset_not_found_usage_and_config(run, vectors, tmp_path):
    s = vectors.load("basic").store
    max_phy = vectors.load("basic").expected["api"]["maxPhyOffset"]
    line = _one_line(run.fails(ExitCode.OFFSET, "query-offset", max_phy, "--store", s))
    assert f"[0, {max_phy})" in line
    run.fails(ExitCode.OFFSET, "print", 10**12, "--store", s)
    far = "0A00000100002A9F" + f"{10**9:016X}"
    assert far in _one_line(run.fails(ExitCode.NOT_FOUND, "query-id", far, "--store", s))
    run.fails(ExitCode.NOT_FOUND, "print", "TopicTest:0:999", "--store", s)
    assert "offsetMsgId" in _one_line(run.fails(ExitCode.USAGE, "query-id", "C0A80A0B1F404E6F7A2100", "--store", s))
    run.fails(ExitCode.USAGE, "print", "not-a-locator", "--store", s)
    run.fails(ExitCode.USAGE, "browse", "--begin", "yesterday-ish", "--store", s)
    run.fails(ExitCode.USAGE, "pull", "TopicTest", "--count", 0, "--store", s)
    run.fails(ExitCode.USAGE, "no-such-command")
    run.fails(ExitCode.USAGE, "topic-status", "--store", s, "--config", tmp_path / "missing.conf")
    bad = tmp_path / "bad.conf"
    bad.write_text("mappedFileSizeCommitLog=lots\n")
    line = _one_line(run.fails(ExitCode.CONFIG, "topic-status", "--store", s, "--config", bad))
    assert "mappedFileSizeCommitLog" in line and "lots" in line


def test_debug_shows_the_traceback(run, vectors, monkeypatch):
    s = vectors.load("basic").store
    r = run("query-offset", 1, "--store", s, "--debug")
    assert r.exit_code == ExitCode.CORRUPT and "Traceback" in r.stderr and "CorruptRecordError" in r.stderr
    r = run("--debug", "query-offset", 1, "--store", s)
    assert r.exit_code == ExitCode.CORRUPT and "Traceback" in r.stderr
    monkeypatch.setenv("RMQSTORE_DEBUG", "1")
    assert "Traceback" in run("query-offset", 1, "--store", s).stderr


def test_unexpected_errors_exit_1_with_a_hint(run, vectors, monkeypatch):
    from rmqstore import MessageStore

    def boom(self):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(MessageStore, "topics", boom)
    line = _one_line(run.fails(ExitCode.INTERNAL, "topic-status", "--store", vectors.load("basic").store))
    assert "kaboom" in line and "--debug" in line


def _caused(exc, cause):
    exc.__cause__ = cause
    return exc


@pytest.mark.parametrize("exc, code", [
    (E.StoreNotFoundError("x", path="/p"), ExitCode.STORE_NOT_FOUND),
    (E.StoreLockedError("x", path="/p"), ExitCode.STORE_LOCKED),
    (E.CorruptRecordError("x", path="/p", offset=3), ExitCode.CORRUPT),
    (E.ReadOnlyStoreError("x", path="/p"), ExitCode.READ_ONLY),
    (E.ConfigError("x"), ExitCode.CONFIG),
    (E.OffsetError("x"), ExitCode.OFFSET),
    (E.OutputExistsError("x", path="/p"), ExitCode.USAGE),
    (_caused(E.StoreIOError("x", path="/p"), PermissionError(13, "Permission denied")), ExitCode.IO),
    (PermissionError(13, "Permission denied", "/p"), ExitCode.IO),
    (OSError(98, "Address already in use"), ExitCode.ADDRESS_IN_USE),
    (E.StoreClosedError("x"), ExitCode.INTERNAL),
    (ValueError("x"), ExitCode.INTERNAL),
])
def test_every_store_error_type_has_its_code(exc, code):
    got, message, hint = classify(exc)
    assert got == code and message and (hint or code == ExitCode.OK)
    if getattr(exc, "path", None):
        assert "/p" in message


def test_locked_store(run, copy_store, tmp_path):
    """A writer in another process holds the lock: writes fail with exit 4, reads still work."""
    store = copy_store("basic")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from rmqstore import MessageStore
        from rmqstore.layout import infer_config
        st = MessageStore.open({str(store)!r}, infer_config({str(store)!r}))
        print("ready", flush=True)
        sys.stdin.read()
        st.close()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        for cmd in (["send", "TopicTest", "x"], ["recover"], ["load", "-"]):
            line = _one_line(run.fails(ExitCode.STORE_LOCKED, *cmd, "--store", store, input='{"topic": "T"}\n'))
            assert "lock" in line and str(store) in line
        assert run.json("topic-status", "--store", store)["queues"]
    finally:
        holder.communicate("", timeout=30)
    assert holder.returncode == 0
    assert run.json("send", "TopicTest", "after", "--store", store)["status"] == "PUT_OK"


def test_spark_unavailable_and_interrupt(run, vectors, monkeypatch):
    s = vectors.load("basic").store
    monkeypatch.setitem(sys.modules, "rmqstore.spark.jobs", None)  # as if pyspark were not installed
    spark_pkg = sys.modules.get("rmqstore.spark")
    if spark_pkg is not None:  # an earlier import left the submodule as an attribute of the package
        monkeypatch.delattr(spark_pkg, "jobs", raising=False)
    line = _one_line(run.fails(ExitCode.SPARK_UNAVAILABLE, "spark", "stats", "--store", s))
    assert "Spark" in line and "setup" in line
    from rmqstore import MessageStore

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(MessageStore, "topics", interrupted)
    r = run("topic-status", "--store", s)
    assert r.exit_code == ExitCode.INTERRUPTED and "Traceback" not in r.stderr


def test_query_id_answers_that_can_be_acted_on(run, truth):
    """An id that does not point at a record start is "no message at" (not found), not "bad magic
    code ... verify --fix" on a healthy store; a client msgId (UNIQ_KEY) is looked up in every topic,
    as mqadmin falls back to; another store host in the id is named."""
    t = truth("basic")
    s = t.store
    r = t.rows[4]
    inside = r["msg_id"][:-16] + f"{r['phy'] + 3:016X}"
    line = _one_line(run.fails(ExitCode.NOT_FOUND, "query-id", inside, "--store", s))
    assert "no record starts there" in line and str(r["phy"] + 3) in line and "verify" not in line
    res = run("query-id", r["uniq_key"], "--json", "--store", s)
    assert res.exit_code == 0 and json.loads(res.stdout)["phy_offset"] == r["phy"]
    assert "client msgId (UNIQ_KEY)" in res.stderr
    other_host = "0B000002" + r["msg_id"][8:]  # same offset, another broker's address
    res = run("query-id", other_host, "--json", "--store", s)
    assert res.exit_code == 0 and json.loads(res.stdout)["phy_offset"] == r["phy"]
    assert "names store host 11.0.0.2" in res.stderr
    run.fails(ExitCode.NOT_FOUND, "query-id", "F" * 32, "--store", s)


def test_the_os_hint_names_the_cause_only_when_it_is_the_cause():
    import errno

    for err, says in ((errno.EACCES, "permissions"), (errno.ENOSPC, "free space"), (errno.EROFS, "read-only")):
        code, _, hint = classify(_caused(E.StoreIOError("cannot write", path="/p"), OSError(err, "x")))
        assert code == ExitCode.IO and says in hint and ("free space" in hint) == (err == errno.ENOSPC)
    code, _, hint = classify(E.StoreIOError("upload: 3 of 4 files reported", path="s3://b/o"))
    assert code == ExitCode.IO and hint is None
    code, _, hint = classify(OSError(errno.EIO, "Input/output error", "/p"))
    assert code == ExitCode.IO and hint is None


def test_json_errors_are_json(run, tmp_path):
    r = run.fails(ExitCode.STORE_NOT_FOUND, "topic-status", "--store", tmp_path / "nope", "--json")
    err = json.loads(r.stderr.strip().splitlines()[-1])
    assert err["exit"] == ExitCode.STORE_NOT_FOUND and str(tmp_path / "nope") in err["error"] and err["hint"]
    assert r.stdout == ""
    r = run("pull", "--no-such-option", "--json")  # click's own usage errors too
    assert r.exit_code == 2 and json.loads(r.stderr.strip())["exit"] == 2
    r = run("spark", "rebuild", "--json")  # inside the spark group
    assert r.exit_code == 2 and "OUT_DIR" in json.loads(r.stderr.strip())["error"]
    r = run("topic-status", "--store", tmp_path / "nope")  # without --json: the one line
    assert r.stderr.startswith("Error: ") and r.exit_code == ExitCode.STORE_NOT_FOUND


def test_serve_refuses_an_address_in_use_before_creating_anything(run, tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        store = tmp_path / "new-store"
        line = _one_line(run.fails(ExitCode.ADDRESS_IN_USE, "serve", "--store", store, "--listen", f"127.0.0.1:{port}"))
        assert "address in use" in line and str(port) in line and "permissions" not in line
        assert not store.exists()
        r = run.fails(ExitCode.ADDRESS_IN_USE, "serve", "--store", store, "--listen", f"127.0.0.1:{port}", "--json")
        assert json.loads(r.stderr.strip().splitlines()[-1])["exit"] == ExitCode.ADDRESS_IN_USE
        line = _one_line(run.fails(ExitCode.ADDRESS_IN_USE, "serve", "--store", store, "--listen", "127.0.0.1:0",
                                   "--grpc-listen", f"127.0.0.1:{port}"))
        assert "--grpc-listen" in line
        assert not store.exists()


@pytest.mark.parametrize("listen", ["localhost", "localhost:9876", "example.com:80", "127.0.0.1", "127.0.0.1:99999"])
def test_serve_listen_needs_ip_and_port(run, tmp_path, listen):
    r = run.fails(ExitCode.USAGE, "serve", "--store", tmp_path / "s", "--listen", listen)
    assert "--listen" in r.stderr and "IP" in r.stderr and "unexpected" not in r.stderr
    assert not (tmp_path / "s").exists()


def test_serve_refuses_a_directory_that_is_not_a_store(run, tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "notes.txt").write_text("x")
    r = run.fails(ExitCode.USAGE, "serve", "--store", d, "--listen", "127.0.0.1:0")
    assert "neither a message store nor an empty directory" in r.stderr
    assert sorted(p.name for p in d.iterdir()) == ["notes.txt"]


def test_namesrv_refuses_a_kv_config_it_cannot_read_before_listening(run, tmp_path):
    bad = tmp_path / "kvConfig.json"
    bad.write_text('{"configTable":{"ns":{"k":"v"}')
    r = run.fails(ExitCode.USAGE, "namesrv", "--listen", "127.0.0.1:0", "--kv-config", bad)
    assert "--kv-config" in r.stderr and str(bad) in r.stderr and "configTable" in r.stderr
    assert bad.read_text() == '{"configTable":{"ns":{"k":"v"}'
    assert "is a directory" in run.fails(ExitCode.USAGE, "namesrv", "--listen", "127.0.0.1:0",
                                         "--kv-config", tmp_path).stderr
