"""Fixtures for the CLI tests: an in-process runner (click's CliRunner), JSON helpers, writable
copies of the reference vector stores, and the "truth" of a vector (input + RocketMQ's answers)."""
from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from rmqstore.cli.main import cli


@dataclass
class Run:
    runner: CliRunner

    def __call__(self, *args, input=None, env=None):
        """Invoke ``rmqstore ARGS`` in-process; returns click's Result (exit_code, stdout, stderr)."""
        return self.runner.invoke(cli, [str(a) for a in args], input=input, env=env, catch_exceptions=False)

    def ok(self, *args, **kw):
        r = self(*args, **kw)
        assert r.exit_code == 0, f"rmqstore {' '.join(map(str, args))} -> {r.exit_code}\n{r.stdout}\n{r.stderr}"
        return r

    def json(self, *args, **kw):
        return json.loads(self.ok(*args, "--json", **kw).stdout)

    def json_lines(self, *args, **kw) -> list:
        return [json.loads(line) for line in self.ok(*args, "--json", **kw).stdout.splitlines() if line.strip()]

    def fails(self, code: int, *args, **kw):
        r = self(*args, **kw)
        assert r.exit_code == code, (f"rmqstore {' '.join(map(str, args))}: expected exit {code}, got "
                                     f"{r.exit_code}\n{r.stdout}\n{r.stderr}")
        assert "Traceback" not in r.stderr + r.stdout
        return r


@pytest.fixture
def run(monkeypatch) -> Run:
    for var in ("RMQSTORE_STORE", "RMQSTORE_DEBUG", "COLUMNS"):
        monkeypatch.delenv(var, raising=False)
    return Run(CliRunner())


def writable_copy(src, dst) -> Path:
    """A copy of a (read-only) vector store that tests may write to."""
    shutil.copytree(src, dst)
    for dp, dns, fns in os.walk(dst):
        os.chmod(dp, os.stat(dp).st_mode | stat.S_IWUSR)
        for f in fns:
            p = os.path.join(dp, f)
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)
    return Path(dst)


@pytest.fixture
def copy_store(tmp_path, vectors):
    """``copy_store(name)``: a writable copy of vectors/<name>/store."""
    def _copy(name: str = "basic") -> Path:
        return writable_copy(vectors.load(name).store, tmp_path / f"{name}-copy")
    return _copy


@dataclass
class Truth:
    """One vector set seen from outside the implementation: input messages joined with RocketMQ's
    put results and decoded records (all from the vector files)."""

    vs: object
    rows: list  # dicts: phy, topic, queue_id, queue_offset, store_ts, props, body, msg_id, uniq_key

    @property
    def store(self) -> Path:
        return self.vs.store


@pytest.fixture(scope="session")
def truth(vectors):
    cache: dict[str, Truth] = {}

    def _truth(name: str) -> Truth:
        if name not in cache:
            vs = vectors.load(name)
            by_phy = vs.messages_by_phy
            rows = []
            for m, pr in zip(vs.input["messages"], vs.expected["putResults"]):
                rec = by_phy[pr["wroteOffset"]]
                rows.append({"phy": pr["wroteOffset"], "topic": m["topic"], "queue_id": m["queueId"],
                             "queue_offset": pr["queueOffset"], "store_ts": pr["storeTimestamp"],
                             "props": dict(rec.get("properties") or {}), "body": vectors.body_of(m),
                             "msg_id": pr["msgId"], "uniq_key": rec.get("uniqKey"), "record": rec})
            rows.sort(key=lambda r: r["phy"])
            cache[name] = Truth(vs, rows)
        return cache[name]

    return _truth
