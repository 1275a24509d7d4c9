"""A few runs of the installed console script in a real subprocess (entry point, exit status,
stderr, pipes)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("rmqstore")


def _exe() -> list[str]:
    if SCRIPT.exists():
        return [str(SCRIPT)]
    found = shutil.which("rmqstore")
    if found is None:
        pytest.skip("the rmqstore console script is not installed (pip install -e .)")
    return [found]


def _run(*args, **kw):
    env = {k: v for k, v in os.environ.items() if k not in ("RMQSTORE_STORE", "RMQSTORE_DEBUG")}
    return subprocess.run([*_exe(), *map(str, args)], capture_output=True, text=True, timeout=120, env=env, **kw)


def test_console_script_help_and_json(vectors, run):
    r = _run("--help")
    assert r.returncode == 0 and "topic-status" in r.stdout and "spark" in r.stdout
    s = vectors.load("basic").store
    r = _run("topic-status", "--store", s, "--json")
    assert r.returncode == 0 and r.stderr == ""
    assert json.loads(r.stdout) == run.json("topic-status", "--store", s)
    assert _run("--version").stdout.strip().startswith("rmqstore")


def test_console_script_errors_are_one_line_without_traceback(tmp_path):
    r = _run("stats", "--store", tmp_path / "missing")
    assert r.returncode == 3 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("Error: ") and "Traceback" not in r.stderr
    r = _run("--debug", "stats", "--store", tmp_path / "missing")
    assert r.returncode == 3 and "Traceback" in r.stderr and "StoreNotFoundError" in r.stderr


def test_console_script_in_a_pipe(vectors):
    """`rmqstore browse | head -1`: output stops quietly when the reader goes away."""
    s = vectors.load("rollover").store
    p = subprocess.run(f"{_exe()[0]} browse --store {s} --json | head -n 1", shell=True, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 1
    assert json.loads(p.stdout)["phy_offset"] == 0
    assert "Traceback" not in p.stderr and "Error" not in p.stderr


def test_the_core_needs_neither_pyarrow_nor_pyspark(tmp_path):
    """The core install is numpy, isal (CRC-32), click, rich, javaproperties (broker.conf as Java reads it) and
    orjson (the broker's JSON headers): the store, a consumer and the CLI work with pyarrow and pyspark made
    unimportable (pyproject's dependencies say the same)."""
    import subprocess
    import sys
    import tomllib
    from pathlib import Path

    meta = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    names = {d.split(">")[0].split("=")[0].split("[")[0].strip() for d in meta["dependencies"]}
    assert names == {"numpy", "isal", "click", "rich", "javaproperties", "orjson"}
    assert {"pyarrow", "pyspark"} <= {d.split(">")[0] for d in meta["optional-dependencies"]["spark"]}
    code = (
        "import sys\n"
        "sys.modules['pyarrow'] = None; sys.modules['pyspark'] = None\n"
        "sys.modules['isal'] = None  # without isal's wheels CRCs fall back to zlib\n"
        "from rmqstore import Message, MessageStore\n"
        "from rmqstore.cli.main import main\n"
        "with MessageStore.open(sys.argv[1]) as st:\n"
        "    st.put_message(Message.create('T', b'x'))\n"
        "    c = st.consumer('g', 'T')\n"
        "    assert [r.body for r in c.poll(10, 1.0)] == [b'x']\n"
        "sys.argv = ['rmqstore', 'stats', '--store', sys.argv[1], '--json']\n"
        "main()\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert '"T"' in out.stdout
