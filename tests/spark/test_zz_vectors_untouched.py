"""Every Spark test reads the RocketMQ-written vector stores in place: afterwards every file is
still what RocketMQ wrote (expected.json ``raw.files``: path, size, sha256), and nothing was added
(this module's name sorts last, so it runs after the others)."""
from __future__ import annotations

import hashlib
import os


def test_vector_stores_are_unchanged(vector):
    want = {f["path"]: (f["size"], f["sha256"]) for f in vector.expected["raw"]["files"]}
    got = {}
    for dp, _, files in os.walk(vector.store):
        for n in files:
            p = os.path.join(dp, n)
            with open(p, "rb") as fh:
                data = fh.read()
            got[os.path.relpath(p, vector.store)] = (len(data), hashlib.sha256(data).hexdigest())
    index_want = sorted(v for k, v in want.items() if k.startswith("index/"))
    index_got = sorted(v for k, v in got.items() if k.startswith("index/"))
    assert index_got == index_want
    assert {k: v for k, v in got.items() if not k.startswith("index/")} == \
           {k: v for k, v in want.items() if not k.startswith("index/")}
