"""The interpreter-start hook (``rmqstore-spark.pth`` → ``_rmqstore_spark_env``): it waits for the
first pyspark import, then names this interpreter for Spark's workers unless the user chose one,
and turns an uncaught DATA_SOURCE_NOT_FOUND for ``rocketmq`` into one line naming the fix. The
end-to-end runs (a real SparkSession, no ``import rmqstore``) are in tests/spark/test_plain_session.py."""
from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import _rmqstore_spark_env as hook

ROOT = Path(__file__).resolve().parents[2]
NOT_FOUND = ("org.apache.spark.SparkClassNotFoundException: [DATA_SOURCE_NOT_FOUND] Failed to find the data "
             "source: rocketmq. Make sure the provider name is correct and the package is properly registered "
             "and compatible with your Spark version. SQLSTATE: 42K02\n\tat org.apache.spark.sql.errors.Q(Q.scala:1)")


def test_names_this_interpreter_only_when_nothing_is_set():
    env: dict[str, str] = {}
    assert hook.name_interpreter(env) == sys.executable and env == {"PYSPARK_DRIVER_PYTHON": sys.executable}
    for given in ({"PYSPARK_PYTHON": "/opt/py"}, {"PYSPARK_DRIVER_PYTHON": "/opt/py"}):
        env = dict(given)
        assert hook.name_interpreter(env) is None and env == given
    assert hook.workers_python({}) == "python3"
    assert hook.workers_python({"PYSPARK_DRIVER_PYTHON": "/d"}) == "/d"
    assert hook.workers_python({"PYSPARK_PYTHON": "/w", "PYSPARK_DRIVER_PYTHON": "/d"}) == "/w"


def test_the_hint_names_the_workers_python_and_the_fix_only_for_our_source():
    hint = hook.not_found_hint(RuntimeError(NOT_FOUND), {"PYSPARK_PYTHON": "/usr/bin/python3"})
    assert hint == (f"format('rocketmq') not found: Spark's Python workers run /usr/bin/python3, which has no "
                    f"rmqstore; set PYSPARK_PYTHON={sys.executable} (an interpreter with rmqstore installed) "
                    f"before the SparkSession starts")
    assert hook.not_found_hint(RuntimeError(NOT_FOUND.replace("rocketmq.", "kafka.")), {}) is None
    assert hook.not_found_hint(ValueError("rocketmq"), {}) is None


def test_the_excepthook_prints_one_line_for_our_error_and_passes_others_on(capsys):
    seen = []
    hooked = hook._excepthook(lambda *a: seen.append(a))
    try:
        raise RuntimeError(NOT_FOUND)
    except RuntimeError as e:
        hooked(type(e), e, e.__traceback__)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "at org.apache" not in err and seen == []
    assert err.startswith(f"{__file__}:") and "format('rocketmq') not found" in err
    other = KeyError("x")
    hooked(KeyError, other, None)
    assert seen == [(KeyError, other, None)] and capsys.readouterr().err == ""


def test_the_watch_acts_once_on_the_first_pyspark_lookup(monkeypatch):
    calls = []
    monkeypatch.setattr(hook, "on_pyspark_import", lambda: calls.append(1))
    watch = hook.PysparkImportWatch()
    assert watch.find_spec("numpy") is None and calls == []
    assert watch.find_spec("pyspark") is None and calls == [1]  # never finds: the real finders import it
    assert watch.find_spec("pyspark") is None and calls == [1]


def _run(code: str, **env) -> str:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={"PATH": "/usr/bin:/bin", **env})
    return p.stdout.strip()


def test_the_pth_file_loads_the_hook_at_start_and_nothing_heavy():
    assert Path(sysconfig.get_path("purelib"), "rmqstore-spark.pth").read_text() == \
        (ROOT / "src" / "rmqstore-spark.pth").read_text()
    out = _run("import sys, os\n"
               "print(any(type(f).__name__ == 'PysparkImportWatch' for f in sys.meta_path),"
               " 'rmqstore' in sys.modules, 'numpy' in sys.modules, os.environ.get('PYSPARK_DRIVER_PYTHON'))")
    assert out == "True False False None"  # nothing set until pyspark is imported
    assert _run("import os, pyspark; print(os.environ.get('PYSPARK_DRIVER_PYTHON'))") == sys.executable
    assert _run("import os, pyspark; print(os.environ.get('PYSPARK_DRIVER_PYTHON'))", PYSPARK_PYTHON="/opt/py") == "None"
    assert _run("import os, pyspark; print(os.environ['PYSPARK_PYTHON'])", PYSPARK_PYTHON="/opt/py") == "/opt/py"


def test_a_missing_hook_module_does_not_break_start_up(tmp_path):
    line = (ROOT / "src" / "rmqstore-spark.pth").read_text().strip()
    p = subprocess.run([sys.executable, "-S", "-c", f"{line}\nprint('started')"], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}, cwd=tmp_path)
    assert p.returncode == 0 and p.stdout == "started\n" and p.stderr == ""


def test_the_wheel_carries_the_pth_file_and_the_hook(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("rmqstore-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert z.read("rmqstore-spark.pth") == (ROOT / "src" / "rmqstore-spark.pth").read_bytes()
        assert z.read("_rmqstore_spark_env.py") == (ROOT / "src" / "_rmqstore_spark_env.py").read_bytes()
