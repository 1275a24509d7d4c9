"""Care commands: recover, rebuild, verify, clean."""
from __future__ import annotations

import json
import os


from rmqstore import MessageStore
from rmqstore.cli.errors import ExitCode


def _tear_last_record(store, t):
    """Simulate a crash: abort file present, the last record only half written (its second half,
    body included, still zero)."""
    last = t.rows[-1]
    assert last["body"]
    size = last["record"]["storeSize"]
    (store / "abort").write_text("4242")
    with open(store / "commitlog" / "00000000000000000000", "r+b") as fh:
        fh.seek(last["phy"] + size // 2)
        fh.write(b"\x00" * (size - size // 2))
    return last


def test_recover_cuts_a_torn_tail_and_reports_it(run, copy_store, truth):
    t = truth("basic")
    store = copy_store("basic")
    last = _tear_last_record(store, t)
    dry = run.json("recover", "--dry-run", "--store", store)
    assert dry["applied"] is False and dry["mode"] == "abnormal" and dry["end_offset"] == last["phy"]
    assert (store / "abort").exists()
    rep = run.json("recover", "--store", store)
    assert rep["applied"] is True and rep["mode"] == "abnormal" and rep["clean"] is False
    assert rep["end_offset"] == last["phy"] == dry["end_offset"]
    assert rep["records_scanned"] == len(t.rows) - 1
    assert [c["offset"] for c in rep["cuts"]] == [last["phy"]]
    assert f"{last['topic']}/{last['queue_id']}" in rep["consume_queues_truncated"]
    assert rep["summary"] and not (store / "abort").exists()
    for c in rep["cuts"]:
        assert c["saved_to"] and os.path.exists(c["saved_to"])
    with MessageStore.open(str(store), t.vs.config, read_only=True) as st:
        assert st.max_phy_offset == last["phy"]
        assert st.get_max_offset_in_queue(last["topic"], last["queue_id"]) == last["queue_offset"]
    again = run.json("recover", "--store", store)
    assert again["mode"] == "normal" and again["clean"] is True and again["end_offset"] == last["phy"]
    table = run.ok("recover", "--store", store).stdout
    assert "normal" in table and str(last["phy"]) in table


def test_rebuild_matches_rocketmq_consume_queues(run, vectors, tmp_path):
    vs = vectors.load("rollover")
    got = run.json("rebuild", tmp_path / "out", "--store", vs.store)
    assert got["records"] == len(vs.expected["putResults"])
    assert got["end_offset"] == vs.expected["api"]["maxPhyOffset"]
    assert got["consume_queues"] == sum(len(q) for q in vs.expected["api"]["consumeQueues"].values())
    assert vectors.tree_hashes(tmp_path / "out" / "consumequeue") == vectors.tree_hashes(vs.store / "consumequeue")
    idx = sorted(os.listdir(vs.store / "index"))
    assert got["index_files"] == len(idx)
    # index files by position (their names are creation times)
    ours = sorted(os.listdir(tmp_path / "out" / "index"))
    for a, b in zip(idx, ours):
        assert (vs.store / "index" / a).read_bytes() == (tmp_path / "out" / "index" / b).read_bytes()
    # refuses to overwrite a rebuilt directory or the store itself: a usage error, not an I/O one
    line = run.fails(ExitCode.USAGE, "rebuild", tmp_path / "out", "--store", vs.store).stderr
    assert "already holds consumequeue/ and index/" in line and "permissions" not in line
    assert "source store" in run.fails(ExitCode.USAGE, "rebuild", vs.store, "--store", vs.store).stderr


def test_verify_finds_and_fixes(run, copy_store, vectors, truth):
    t = truth("basic")
    store = copy_store("basic")
    ok = run.json("verify", "--store", store)
    assert ok == {"store": str(store), "fix": False, "ok": True, "summary": {}, "findings": [], "fixed": 0,
                  "unfixed": 0, "advice": []}
    assert "no problems" in run.ok("verify", "--store", store).stdout
    # a consume-queue unit that points at the wrong record: found, then fixed from the commitlog
    victim = next(r for r in t.rows if r["queue_offset"] == 1)
    cq_file = store / "consumequeue" / victim["topic"] / str(victim["queue_id"]) / "00000000000000000000"
    with open(cq_file, "r+b") as fh:
        fh.seek(20 * victim["queue_offset"])
        fh.write((victim["phy"] + 1).to_bytes(8, "big"))
    r = run.fails(ExitCode.PROBLEMS_FOUND, "verify", "--store", store, "--json")
    bad = json.loads(r.stdout)
    assert bad["ok"] is False and bad["unfixed"] >= 1
    assert any(f["path"] == str(cq_file) and f["kind"] == "cq_unit" for f in bad["findings"])
    assert bad["summary"]["cq_unit"]["found"] == sum(f["kind"] == "cq_unit" for f in bad["findings"])
    assert sum(c["found"] for c in bad["summary"].values()) == len(bad["findings"])
    assert any("rebuilds the consume queue" in a for a in bad["advice"])
    assert "verify --fix" in r.stderr
    table = run("verify", "--limit", "0", "--store", store).stdout
    assert "findings by kind" in table and "cq_unit" in table and "what to do:" in table
    fixed = run.json("verify", "--fix", "--store", store)
    assert fixed["fix"] is True and fixed["ok"] is True and fixed["fixed"] == len(fixed["findings"]) >= 1
    assert run.json("verify", "--store", store)["ok"] is True
    assert vectors.tree_hashes(store / "consumequeue") == vectors.tree_hashes(t.store / "consumequeue")
    # a damaged commitlog record cannot be fixed: it stays reported, exit 12, named by file and offset
    victim = t.rows[7]
    seg = store / "commitlog" / "00000000000000000000"
    data = seg.read_bytes()
    at = data.index(victim["body"], victim["phy"], victim["phy"] + victim["record"]["storeSize"])
    with open(seg, "r+b") as fh:  # one byte of the body: its CRC no longer matches
        fh.seek(at)
        fh.write(bytes([data[at] ^ 0xFF]))
    for args in ([], ["--fix"]):
        got = json.loads(run.fails(ExitCode.PROBLEMS_FOUND, "verify", *args, "--json", "--store", store).stdout)
        crc = [f for f in got["findings"] if f["offset"] == victim["phy"]]
        assert crc and crc[0]["path"].endswith("commitlog/00000000000000000000") and not crc[0]["fixed"]


def test_clean_dry_run_then_for_real(run, copy_store, vectors, truth):
    t = truth("rollover")
    store = copy_store("rollover")
    segments = sorted(os.listdir(store / "commitlog"))
    before = vectors.tree_hashes(store)
    idle = run.json("clean", "--dry-run", "--now", "2023-11-15T00:00:00Z", "--store", store)
    assert idle["commitlog_files"] == [] and idle["dry_run"] is True
    future = "2100-01-01T00:00:00Z"
    plan = run.json("clean", "--dry-run", "--force", "--now", future, "--store", store)
    batch = 10  # deleteFileBatchMax default
    assert [os.path.basename(f) for f in plan["commitlog_files"]] == segments[:batch]
    assert plan["min_offset_after"] == int(segments[batch])
    assert vectors.tree_hashes(store) == before  # a dry run changes nothing
    done = run.json("clean", "--force", "--now", future, "--store", store)
    assert done["dry_run"] is False and done["commitlog_files"] == plan["commitlog_files"]
    assert sorted(os.listdir(store / "commitlog")) == segments[batch:]
    with MessageStore.open(str(store), t.vs.config, read_only=True) as st:
        assert st.min_phy_offset == int(segments[batch])
    first_kept = min(r["phy"] for r in t.rows if r["phy"] >= int(segments[batch]))
    kept = next(r for r in t.rows if r["phy"] == first_kept)
    status = {(q["topic"], q["queue_id"]): q for q in run.json("topic-status", "--store", store)["queues"]}
    assert status[(kept["topic"], kept["queue_id"])]["min_offset"] == kept["queue_offset"]
    low = run.json("pull", kept["topic"], "-q", kept["queue_id"], "-o", 0, "--single", "--store", store)
    assert low["status"] == "OFFSET_TOO_SMALL"
    table = run.ok("clean", "--dry-run", "--force", "--now", future, "--store", store).stdout
    assert "dry run" in table and segments[batch] in table
