"""No command deletes or overwrites what it did not create: the demo keeps to its own marked
directory, a store whose lock a live process holds is refused at once (exit 4), and outputs that
exist are refused before any work starts (exit 2)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from rmqstore import MessageStore
from rmqstore.cli.errors import ExitCode
from rmqstore.demo import MARKER
from rmqstore.message_store import lock_holder
from tests.kit import tree_hashes


@pytest.fixture
def held(tmp_path):
    """``held(store)``: another process opens ``store`` for writing (creating it) and holds its lock
    until the test ends."""
    procs = []

    def _hold(store) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from rmqstore import Message, MessageStore
            st = MessageStore.open({str(store)!r})
            st.put_message(Message.create("Live", b"a live broker's message"))
            st.wait_dispatched()
            print("ready", flush=True)
            sys.stdin.read()
            st.close()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout.readline().strip() == "ready"
        return p

    yield _hold
    for p in procs:
        p.communicate("", timeout=30)
        assert p.returncode == 0


def _files(d) -> dict:
    return {k: v for k, v in tree_hashes(d).items() if k != "lock"}


def test_demo_refuses_a_live_store(run, tmp_path, held):
    live = tmp_path / "live"
    held(live)
    before = _files(live)
    r = run.fails(ExitCode.STORE_LOCKED, "demo", "--dir", live, "--messages", 10, "--no-spark")
    assert "lock" in r.stderr and str(live) in r.stderr
    assert _files(live) == before and lock_holder(live) not in (None, os.getpid())


def test_demo_refuses_a_live_store_even_when_it_made_it(run, tmp_path, held):
    d = tmp_path / "d"
    run.ok("demo", "--dir", d, "--messages", 10, "--no-spark")
    held(d)
    before = _files(d)
    run.fails(ExitCode.STORE_LOCKED, "demo", "--dir", d, "--messages", 10, "--no-spark")
    assert _files(d) == before


def test_demo_refuses_a_store_open_in_this_process(run, tmp_path):
    d = tmp_path / "d"
    run.ok("demo", "--dir", d, "--messages", 10, "--no-spark")
    with MessageStore.open(str(d)) as st:
        run.fails(ExitCode.STORE_LOCKED, "demo", "--dir", d, "--messages", 10, "--no-spark")
        assert lock_holder(d) == os.getpid() and st.get_max_offset_in_queue("Orders", 0) > 0
        # the check did not drop this process's lock: another process still cannot take it
        probe = subprocess.run([sys.executable, "-c", f"from rmqstore.message_store import lock_holder; "
                                                      f"print(lock_holder({str(d)!r}))"],
                               capture_output=True, text=True, check=True)
        assert probe.stdout.strip() not in ("None", "")


def test_demo_refuses_a_directory_it_did_not_make(run, tmp_path, held):
    stopped = tmp_path / "stopped"  # a store nobody has open (a stopped broker's)
    with MessageStore.open(str(stopped)) as st:
        from tests.kit import msg
        st.put_message(msg("T"))
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    for d in (stopped, other):
        before = tree_hashes(d)
        r = run.fails(ExitCode.USAGE, "demo", "--dir", d, "--messages", 10, "--no-spark")
        assert "did not create" in r.stderr and MARKER in r.stderr
        assert tree_hashes(d) == before
    f = tmp_path / "a-file"
    f.write_text("x")
    run.fails(ExitCode.USAGE, "demo", "--dir", f, "--messages", 10, "--no-spark")
    assert f.read_text() == "x"


def test_demo_has_no_store_alias(run, tmp_path):
    r = run("demo", "--store", tmp_path / "d", "--messages", 10, "--no-spark")
    assert r.exit_code == 2 and "--store" in r.stderr
    assert not (tmp_path / "d").exists()


@pytest.fixture
def no_spark(monkeypatch):
    """Fails the test if a command starts Spark."""
    from rmqstore.cli import commands_spark

    def started(*a, **k):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(commands_spark, "open_session", started)


def test_spark_outputs_that_exist_are_refused_before_spark_starts(run, tmp_path, held, no_spark):
    store = tmp_path / "store"
    with MessageStore.open(str(store)) as st:
        from tests.kit import msg
        st.put_message(msg("T"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.parquet").write_text("not the job's")
    for cmd in (["spark", "export", out], ["spark", "rebuild", out]):
        r = run.fails(ExitCode.USAGE, *cmd, "--store", store)
        assert str(out) in r.stderr and "permissions" not in r.stderr
    assert [p.name for p in out.iterdir()] == ["mine.parquet"]
    empty = tmp_path / "empty"
    empty.mkdir()  # Spark writes an export only where nothing is
    assert "already exists" in run.fails(ExitCode.USAGE, "spark", "export", empty, "--store", store).stderr
    assert "source store" in run.fails(ExitCode.USAGE, "spark", "rebuild", store, "--store", store).stderr
    live = tmp_path / "live"
    held(live)
    run.fails(ExitCode.STORE_LOCKED, "spark", "rebuild", live, "--store", store)
    run.fails(ExitCode.STORE_LOCKED, "rebuild", live, "--store", store)


def test_export_never_writes_into_a_store(run, tmp_path):
    store = tmp_path / "store"
    with MessageStore.open(str(store)) as st:
        from tests.kit import msg
        st.put_message(msg("T"))
    seg = next((store / "commitlog").iterdir())
    before = tree_hashes(store)
    for target in (seg, store / "export.jsonl"):
        r = run.fails(ExitCode.USAGE, "export", target, "--format", "jsonl", "--force", "--store", store)
        assert "inside the store directory" in r.stderr
    assert "is a directory" in run.fails(ExitCode.USAGE, "export", tmp_path, "--format", "jsonl",
                                         "--store", store).stderr
    assert tree_hashes(store) == before
    kept = tmp_path / "kept.jsonl"
    kept.write_text("mine\n")
    run.fails(ExitCode.USAGE, "export", kept, "--format", "jsonl", "--store", store)
    assert kept.read_text() == "mine\n"
    from rmqstore.errors import OutputExistsError
    from rmqstore.export import export

    with pytest.raises(OutputExistsError):  # the library refuses too, unless told to overwrite
        export(str(store), str(kept), "jsonl")
    assert export(str(store), str(kept), "jsonl", overwrite=True).messages == 1


@pytest.mark.parametrize("argv", [["send", "T", "x"], ["load", "-"], ["recover"], ["clean", "--force"],
                                  ["verify", "--fix"], ["serve", "--listen", "127.0.0.1:0"]])
def test_writers_refuse_a_held_lock_at_once(run, tmp_path, held, argv):
    live = tmp_path / "live"
    held(live)
    before = _files(live)
    t0 = time.monotonic()
    # load is given input it would reject (exit 2): the lock is judged before the input is read
    r = run.fails(ExitCode.STORE_LOCKED, *argv, "--store", live, input="not json\n")
    assert "lock" in r.stderr and time.monotonic() - t0 < 30
    assert _files(live) == before


def test_read_only_opens_leave_a_writers_lock_alone(tmp_path):
    """A read-only open in the process that holds the lock keeps the lock (closing a descriptor of
    the lock file would drop it)."""
    d = tmp_path / "s"
    with MessageStore.open(str(d)) as st:
        from tests.kit import msg
        st.put_message(msg("T"))
        st.wait_dispatched()
        with MessageStore.open(str(d), read_only=True) as ro:
            assert ro.live_writer_pid == os.getpid()
        probe = subprocess.run([sys.executable, "-c", f"from rmqstore import MessageStore\n"
                                                      f"MessageStore.open({str(d)!r})"],
                               capture_output=True, text=True)
        assert probe.returncode != 0 and "StoreLockedError" in probe.stderr
