"""A writer process for the streaming test: appends messages to a store for a few seconds, in
single puts and batches of random sizes, with short pauses (segments of 64 KiB, so they roll)."""
from __future__ import annotations

import random
import sys
import time

from rmqstore import Message, MessageStore

from storegen import small_config


def main(path: str, messages: int, seed: int) -> None:
    rng = random.Random(seed)
    cfg = small_config(commitlog=64 * 1024)
    with MessageStore.open(path, cfg) as st:
        i = 0
        while i < messages:
            k = min(rng.randint(1, 25), messages - i)
            msgs = [Message(f"Live{(i + j) % 3}", rng.randbytes(rng.randint(0, 600)), queue_id=(i + j) % 4,
                            properties={"TAGS": "t", "KEYS": f"k{i + j}", "UNIQ_KEY": f"{i + j:032X}"})
                    for j in range(k)]
            if rng.random() < 0.5:
                for m in msgs:
                    assert st.put_message(m).ok
            else:
                for m in msgs:
                    m.topic, m.queue_id = msgs[0].topic, msgs[0].queue_id
                assert st.put_messages(msgs).ok
            i += k
            time.sleep(rng.random() * 0.004)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
