"""Commands that read never modify the store: every file's bytes, size and mtime stay, no file
appears or disappears -- also on a crashed store (abort file) whose recovery would cut a tail."""
from __future__ import annotations

import os

from rmqstore import MessageStore


def _snapshot(root):
    out = {}
    for dp, _, fs in os.walk(root):
        for f in fs:
            p = os.path.join(dp, f)
            st = os.stat(p)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = (fh.read(), st.st_size, st.st_mtime_ns)
    return out


def _read_commands(t, out_dir):
    r = t.rows[5]
    loc = f"{r['topic']}:{r['queue_id']}:{r['queue_offset']}"
    return [
        ["topic-status"], ["topic-status", r["topic"]], ["stats"], ["pull", r["topic"], "-q", r["queue_id"]],
        ["pull", r["topic"], "--single", "--tags", "TagA"], ["query-key", r["topic"], "order-5"],
        ["query-key", r["topic"], "order-5", "--upstream"], ["query-unique-key", r["topic"], r["uniq_key"]],
        ["query-id", r["msg_id"]], ["query-offset", r["phy"]], ["print", loc], ["print", r["msg_id"], "--body-as", "hex"],
        ["browse"], ["browse", r["topic"], "--grep", "Rocket", "--begin", 0, "--end", "now"],
        ["offset-by-time", r["topic"], r["store_ts"]], ["recover", "--dry-run"], ["rebuild", out_dir],
        ["verify"], ["clean", "--dry-run", "--force", "--now", "2100-01-01T00:00:00Z"],
    ]


def _check_untouched(run, store, t, tmp_path, allowed_exit=(0,)):
    before = _snapshot(store)
    for i, cmd in enumerate(_read_commands(t, tmp_path / "rebuilt")):
        for json_flag in ([], ["--json"]):
            if cmd[0] == "rebuild":
                cmd = ["rebuild", tmp_path / f"rebuilt{i}{len(json_flag)}"]
            r = run(*cmd, *json_flag, "--store", store)
            assert r.exit_code in allowed_exit, (cmd, r.exit_code, r.stderr)
    after = _snapshot(store)
    assert sorted(after) == sorted(before)
    for name in before:
        assert after[name] == before[name], name


def test_reading_commands_leave_a_clean_store_untouched(run, copy_store, truth, tmp_path):
    t = truth("basic")
    _check_untouched(run, copy_store("basic"), t, tmp_path)


def test_reading_commands_leave_a_crashed_store_untouched(run, copy_store, truth, tmp_path):
    """A store left by a crash: abort file present and a torn last record. Reads must not recover it."""
    t = truth("basic")
    store = copy_store("basic")
    (store / "abort").write_text("12345")
    last = t.rows[-1]
    with open(store / "commitlog" / "00000000000000000000", "r+b") as fh:
        fh.seek(last["phy"] + 30)
        fh.write(b"\xee" * 40)
    with MessageStore.open(str(store), t.vs.config, read_only=True) as st:
        assert st.recovery_report.cuts  # the read-only open sees the damage ...
    # ... and every read command works around it without repairing anything
    _check_untouched(run, store, t, tmp_path, allowed_exit=(0, 5, 8, 11, 12))
