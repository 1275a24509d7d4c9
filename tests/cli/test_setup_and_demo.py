"""scripts/setup installs nothing unchanged and only what its caller uses (the demo: the spark
extra; the tests: the test extras and the real clients); the Spark commands keep the JVM's
start-up chatter off the terminal."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rmqstore.cli.commands_spark import jvm_log

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/usr/bin/env bash
# stands in for .venv/bin/python: logs pip calls, answers the setup script's probe
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then echo "pip $*" >> "$CALLS"; touch "$CALLS.installed"; echo "WARNING: Location 'file:///x/' is ignored: it is neither a file nor a directory." >&2; exit 0; fi
if [ "$1" = "-c" ]; then case "$2" in *sysconfig*) echo "$SITE"; exit 0;; esac; if [ -e "$CALLS.installed" ]; then echo "3.11.7 True"; else echo "3.11.7 False"; fi; exit 0; fi
exit 1
"""


@pytest.fixture
def tree(tmp_path):
    """A copy of the scripts and pyproject.toml with a fake virtualenv, java and setup_clients."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup", tmp_path / "scripts" / "setup")
    (tmp_path / "scripts" / "setup_clients").write_text('#!/usr/bin/env bash\necho clients >> "$CALLS"\n')
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy(ROOT / "setup.py", tmp_path / "setup.py")
    (tmp_path / "src").mkdir()
    shutil.copy(ROOT / "src" / "rmqstore-spark.pth", tmp_path / "src" / "rmqstore-spark.pth")
    (tmp_path / "site").mkdir()  # the fake virtualenv's site-packages
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").write_text(FAKE_PYTHON)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "java").write_text("#!/bin/sh\n")
    for p in (tmp_path / "scripts" / "setup", tmp_path / "scripts" / "setup_clients",
              tmp_path / ".venv" / "bin" / "python", tmp_path / "bin" / "java"):
        p.chmod(0o755)
    return tmp_path


def _setup(tree, *args) -> tuple[list[str], str]:
    calls = tree / "calls.log"
    calls.write_text("")
    env = dict(os.environ, CALLS=str(calls), SITE=str(tree / "site"), PATH=f"{tree / 'bin'}:{os.environ['PATH']}")
    p = subprocess.run([str(tree / "scripts" / "setup"), *args], capture_output=True, text=True, env=env,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    return calls.read_text().splitlines(), p.stderr


def test_setup_installs_what_the_caller_uses_and_nothing_unchanged(tree):
    # a fresh virtualenv: the package is not installed before the first run, and is after it
    calls, err = _setup(tree)
    assert calls == ["pip -m pip install -q -e .[spark]"]  # the demo's: no test extras, no clients
    assert "WARNING: Location" not in err
    # the start-up hook by which Spark's workers find the source: copied beside the packages, kept
    assert (tree / "site" / "rmqstore-spark.pth").read_bytes() == (ROOT / "src" / "rmqstore-spark.pth").read_bytes()
    assert _setup(tree) == ([], "")  # unchanged: nothing installed again
    assert _setup(tree) == ([], "")
    calls, _ = _setup(tree, "--test")
    assert calls == ["pip -m pip install -q -e .[test,spark,bench,grpc,http,docs]", "clients"]
    assert _setup(tree, "--test")[0] == ["clients"]  # (setup_clients skips what is present itself)
    with open(tree / "pyproject.toml", "a") as fh:
        fh.write("\n# changed\n")
    assert _setup(tree)[0] == ["pip -m pip install -q -e .[spark]"]  # pyproject.toml changed: again
    os.unlink(f"{tree / 'calls.log'}.installed")  # the package removed from the virtualenv: again
    assert _setup(tree)[0] == ["pip -m pip install -q -e .[spark]"]


def test_the_jvm_start_writes_to_a_log_not_the_terminal(capfd):
    with jvm_log() as path:
        os.write(2, b"WARN NativeCodeLoader: chatter\n")
        subprocess.run(["sh", "-c", "echo 'WARNING: Using incubator modules' >&2"], check=True)  # a child too
        assert "chatter" in Path(path).read_text() and "incubator" in Path(path).read_text()
    assert not os.path.exists(path)  # started: the log goes
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"
    with pytest.raises(RuntimeError):
        with jvm_log() as kept:
            os.write(2, b"java: not found\n")
            raise RuntimeError("no java")
    assert "java: not found" in Path(kept).read_text()  # a failed start keeps its log (the error names it)
    os.unlink(kept)
