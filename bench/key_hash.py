"""``index_key_hash`` of 50,000 producer UNIQ_KEYs (the head of each memoised) against hashing the
whole ``topic#key`` as before, µs a key, min of 5 repeats:
``.venv/bin/python bench/key_hash.py`` (run it several times: the machine is shared)."""
from __future__ import annotations

import timeit

from rmqstore.format import hashes as H

keys = [f"0100007F00000EF1{i:016X}" for i in range(50000)]
new = min(timeit.repeat(lambda: [H.index_key_hash("BenchRaw", k) for k in keys], number=1, repeat=5)) / len(keys) * 1e6
old = min(timeit.repeat(lambda: [H.abs_key_hash(H.java_hash("BenchRaw#" + k)) for k in keys], number=1, repeat=5)) / len(keys) * 1e6
print(f"whole string {old:.2f} us a key, memoised head {new:.2f} us a key, ratio {old / new:.2f}")
