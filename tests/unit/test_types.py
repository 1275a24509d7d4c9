"""types.py: a Message refuses wrong types and separator characters when it is built, and
Message.create builds the properties as a RocketMQ producer does."""
from __future__ import annotations

import pytest

from rmqstore import Message


@pytest.mark.parametrize("bad, error", [
    (dict(body=None), TypeError), (dict(body=123), TypeError), (dict(body="text"), TypeError),
    (dict(body={"a": 1}), TypeError), (dict(topic=b"T"), TypeError), (dict(queue_id="1"), TypeError),
    (dict(flag=1.5), TypeError), (dict(properties={"a\x01b": "v"}), ValueError),
    (dict(properties=[("k", "v\x02w")]), ValueError), (dict(properties={"": "v"}), ValueError),
    (dict(properties={1: "v"}), TypeError), (dict(properties=5), TypeError),
    (dict(properties=[("", "v")]), ValueError), (dict(properties=[("k\x01", "v")]), ValueError),
    (dict(properties=[(1, "v")]), TypeError), (dict(properties=[("k", "v", "w")]), TypeError),
    (dict(properties=[("a", "v"), ("k", 7), ("b", "\x01")]), ValueError),
])
def test_bad_input_is_refused_at_the_door(bad, error):
    """Wrong types and separator characters fail when the Message is built, before any put: a body
    of 123 used to be stored as 123 zero bytes, a name holding \x01 corrupted the properties."""
    kw = dict(topic="T", body=b"x")
    kw.update(bad)
    with pytest.raises(error) as e:
        Message(**kw)
    assert str(e.value)


def test_pairs_of_any_printable_value_are_taken():
    """A list of pairs (what the broker builds) is checked as a mapping is: values as written."""
    props = [("a", "v"), ("n", 7), ("z", None)]
    assert Message(topic="T", properties=props).properties == props


def test_create_refuses_keys_with_spaces_and_bad_types():
    with pytest.raises(ValueError, match="contains a space"):
        Message.create("T", b"", keys="x y")  # upstream would split it into two keys
    with pytest.raises(ValueError, match="contains a space"):
        Message.create("T", b"", keys=["ok", "x y"])
    with pytest.raises(TypeError):
        Message.create("T", b"", keys=["ok", 7])
    with pytest.raises(TypeError):
        Message.create("T", b"", tags=5)
    with pytest.raises(ValueError):
        Message.create("T", b"", tags="a\x02b")
    with pytest.raises(TypeError, match="encode it first"):
        Message.create("T", "text body")
    m = Message.create("T", bytearray(b"ab"), keys=["k1", "k2"], properties={"n": 5})
    assert m.body == b"ab" and type(m.body) is bytes and m.properties["KEYS"] == "k1 k2"
