"""Spark finds the ``rocketmq`` data source from any program run with rmqstore's interpreter.

Spark looks Python data sources up (every installed top-level ``pyspark_*`` module: rmqstore ships
``pyspark_rmqstore``), plans and reads them in worker processes running ``$PYSPARK_PYTHON``, else
``$PYSPARK_DRIVER_PYTHON``, else ``python3`` from ``PATH`` -- as the JVM's environment had them when
the session started. A program run with a virtualenv's interpreter without activating the
virtualenv gets the system's ``python3``, which has no rmqstore, and Spark answers
``DATA_SOURCE_NOT_FOUND`` with a Java trace.

``rmqstore-spark.pth`` (installed beside the package) imports this module at interpreter start. It
costs one finder on ``sys.meta_path`` that does nothing until the interpreter imports ``pyspark``;
then, when neither variable is set, it names this interpreter in ``PYSPARK_DRIVER_PYTHON`` before any
session can start, and it makes an uncaught ``DATA_SOURCE_NOT_FOUND`` for ``rocketmq`` (the workers'
Python has no rmqstore) end in one line naming the fix instead of the trace. A program that sets
either variable, or ``spark.pyspark.python``, keeps its choice. Only ``os`` and ``sys`` are imported
here: this runs in every interpreter of the environment. (PYTEST_DONT_REWRITE: pytest, loading the
package's plugin, would otherwise warn that this module was imported before it could rewrite it.)
"""
from __future__ import annotations

import os
import sys

ENV = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")


def name_interpreter(environ=os.environ) -> str | None:
    """Set ``PYSPARK_DRIVER_PYTHON`` to this interpreter when neither variable is set; the value
    set, or None when something was set already."""
    if any(environ.get(k) for k in ENV) or not sys.executable:
        return None
    environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return sys.executable


def workers_python(environ=os.environ) -> str:
    """The interpreter Spark starts for Python workers, as the environment names it now."""
    return environ.get("PYSPARK_PYTHON") or environ.get("PYSPARK_DRIVER_PYTHON") or "python3"


def not_found_hint(exc: BaseException, environ=os.environ) -> str | None:
    """One line naming the fix when ``exc`` is Spark's DATA_SOURCE_NOT_FOUND for ``rocketmq``; else
    None."""
    text = str(exc)
    if "DATA_SOURCE_NOT_FOUND" not in text or "data source: rocketmq." not in text:
        return None
    return (f"format('rocketmq') not found: Spark's Python workers run {workers_python(environ)}, which "
            f"has no rmqstore; set PYSPARK_PYTHON={sys.executable} (an interpreter with rmqstore "
            f"installed) before the SparkSession starts")


def _user_frame(tb) -> str:
    """``file:line`` of the innermost frame of ``tb`` outside pyspark and py4j: the user's call."""
    where = ""
    while tb is not None:
        code = tb.tb_frame.f_code
        parts = code.co_filename.replace("\\", "/").split("/")
        if "pyspark" not in parts and "py4j" not in parts:
            where = f"{code.co_filename}:{tb.tb_lineno}: "
        tb = tb.tb_next
    return where


def _excepthook(previous):
    def hook(kind, value, tb):
        hint = not_found_hint(value)
        if hint is None:
            return previous(kind, value, tb)
        print(f"{_user_frame(tb)}{hint}", file=sys.stderr, flush=True)
        return None
    hook.rmqstore = True
    return hook


def on_pyspark_import() -> None:
    """What happens when this interpreter first imports pyspark (or when rmqstore is imported with
    pyspark not yet imported): name the interpreter, and hint instead of a trace."""
    name_interpreter()
    if not getattr(sys.excepthook, "rmqstore", False):
        sys.excepthook = _excepthook(sys.excepthook)


class PysparkImportWatch:
    """A ``sys.meta_path`` finder that never finds anything: it runs :func:`on_pyspark_import` once,
    when ``pyspark`` is first looked up, and lets the real finders import it."""

    def __init__(self):
        self.seen = False

    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" and not self.seen:
            self.seen = True
            on_pyspark_import()
        return None


def install() -> None:
    """Put the watch first on ``sys.meta_path`` (once), unless pyspark is imported already."""
    if "pyspark" in sys.modules or any(isinstance(f, PysparkImportWatch) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, PysparkImportWatch())


install()
