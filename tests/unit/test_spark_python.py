"""spark_python.py: ``import rmqstore`` names this interpreter for Spark's data-source workers
unless the user chose one, and says what to do when a session already runs."""
from __future__ import annotations

import subprocess
import sys
import warnings

from rmqstore.spark_python import spark_python_default


def test_names_this_interpreter_only_when_nothing_is_set():
    env: dict[str, str] = {}
    assert spark_python_default(env) == sys.executable and env == {"PYSPARK_DRIVER_PYTHON": sys.executable}
    for given in ({"PYSPARK_PYTHON": "/opt/py"}, {"PYSPARK_DRIVER_PYTHON": "/opt/py"}):
        env = dict(given)
        assert spark_python_default(env) is None and env == given  # the user's choice stands


def test_import_sets_it_before_a_session_starts():
    code = ("import os\nimport rmqstore\nprint(os.environ.get('PYSPARK_DRIVER_PYTHON'))")
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == sys.executable


def test_a_running_session_gets_a_warning_naming_the_fix(monkeypatch):
    import types

    active = types.SimpleNamespace(SparkSession=types.SimpleNamespace(getActiveSession=lambda: object()))
    monkeypatch.setitem(sys.modules, "pyspark.sql.session", active)
    env: dict[str, str] = {}
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        assert spark_python_default(env) is None
    assert env == {} and len(got) == 1 and f"PYSPARK_PYTHON={sys.executable}" in str(got[0].message)
