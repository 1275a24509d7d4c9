"""`rmqstore demo` without Spark (the Spark step is covered in test_spark.py)."""
from __future__ import annotations

from rmqstore import MessageStore
from rmqstore.layout import infer_config


def test_demo_without_spark(run, tmp_path):
    d = tmp_path / "demo"
    d.mkdir()  # an empty directory: the demo takes it and marks it as its own
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=1048576\nmappedFileSizeConsumeQueue=6000\n")
    got = run.json("demo", "--dir", d, "--messages", 3000, "--no-spark", "--config", conf)
    assert got["ok"] is True and got["messages"] == 3000 and got["spark_stats"] is None
    assert all(c["ok"] for c in got["checks"]) and got["checks"]
    steps = {s["step"]: s for s in got["steps"]}
    assert steps["write (put_message, one at a time)"]["count"] == 3000
    assert steps["pull every queue (get_message, 32 at a time)"]["per_second"] > 0
    # a wait is no work on items: no count and no rate (a rate of "waiting" means nothing)
    waits = [s for s in got["steps"] if s["count"] is None]
    assert waits and all(s["per_second"] is None for s in waits)
    assert all(s["per_second"] is not None for s in got["steps"] if s["count"] is not None)
    assert (d / ".rmqstore-demo").is_file()
    with MessageStore.open(str(d), infer_config(str(d)), read_only=True) as st:
        total = sum(st.get_max_offset_in_queue(t, q) for t, qs in st.topics().items() for q in qs)
        assert total == 3000 and st.max_phy_offset >= got["bytes_written"]  # + blank records at segment ends
        assert st.cfg.mapped_file_size_commit_log == 1048576  # --config was used
    stats = run.json("stats", "--store", d)
    assert stats["totals"]["messages"] == 3000 and stats["totals"]["bytes"] == got["bytes_written"]
    (d / "left-by-the-first-run").write_text("the demo empties a directory it made")
    table = run.ok("demo", "--dir", d, "--messages", 500, "--no-spark").stdout
    assert not (d / "left-by-the-first-run").exists()
    assert "500 messages" in table and "FAIL" not in table and table.count("ok  ") == len(got["checks"])
    assert "messages/s" in table and "lookups/s" in table
