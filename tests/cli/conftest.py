"""Fixtures for the CLI tests: an in-process runner (click's CliRunner), JSON helpers, writable
copies of the reference vector stores, and the "truth" of a vector (input + RocketMQ's answers)."""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import types
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


# ------------------------------------------------------------------------------------------------
# The CLI reference as the tests read it: docs/cli.md, its per-command sections and documented JSON shapes.
# ------------------------------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]


def reference_text() -> str:
    """The CLI reference page, docs/cli.md."""
    return (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def sections() -> dict[str, str]:
    """``command path -> its section text`` from the ``## `rmqstore X``` headings."""
    text = reference_text()
    out = {}
    parts = re.split(r"^#{2,3} `rmqstore ([a-z -]+)`\s*$", text, flags=re.M)
    for i in range(1, len(parts), 2):
        out[parts[i].strip()] = parts[i + 1]
    return out


def doc_json(path: str) -> dict | None:
    m = re.search(r"```json\n(.*?)```", sections()[path], flags=re.S)
    return json.loads(m.group(1)) if m else None


def same_shape(doc, got, where):
    if isinstance(doc, dict) and isinstance(got, dict):
        assert set(doc) == set(got), f"{where}: documented {sorted(doc)} vs printed {sorted(got)}"
        for k in doc:
            if k in ("properties", "summary", "spark_stats", "steps"):  # open-ended maps
                continue
            same_shape(doc[k], got[k], f"{where}.{k}")
    elif isinstance(doc, list) and doc and isinstance(got, list) and got:
        same_shape(doc[0], got[0], f"{where}[0]")


@pytest.fixture(scope="session")
def docref():
    """``docref.reference_text()``, ``.sections()``, ``.doc_json(path)``, ``.same_shape(doc, got, where)``."""
    return types.SimpleNamespace(reference_text=reference_text, sections=sections, doc_json=doc_json,
                                 same_shape=same_shape)
