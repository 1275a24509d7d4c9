"""Running one measurement in a fresh child process, shared by the benchmark scripts (harness.py,
durability.py and those built on them): the child's result dict comes back with its own peak RSS.
Imports nothing of the other bench modules, so any of them can import it."""
from __future__ import annotations

import multiprocessing as mp
import os
import resource


def _child(conn, fn, args):
    try:
        res = fn(*args)
        res["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        conn.send(res)
    except BaseException as e:  # noqa: BLE001
        conn.send({"error": f"{type(e).__name__}: {e}"})
    finally:
        conn.close()


def settle() -> None:
    """Write back what earlier measurements left dirty in the page cache, so that the kernel's
    writeback threads do not compete with the next one for the 2 cores."""
    os.sync()


def run_child(fn, *args) -> dict:
    """``fn(*args)`` (a dict) in a forked child, after :func:`settle`; ``rss_mb`` is the child's
    peak RSS in MiB. An exception in the child is raised here as RuntimeError."""
    settle()
    ctx = mp.get_context("fork")
    a, b = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(b, fn, args))
    p.start()
    b.close()
    res = a.recv()
    p.join()
    if "error" in res:
        raise RuntimeError(f"{fn.__name__}{args}: {res['error']}")
    return res
