"""Topic attributes (``message.type`` and the rest of ``TopicAttributes.ALL``) as ``UPDATE_AND_CREATE_TOPIC``
alters them (``AttributeParser`` / ``AttributeUtil``), and a RocketMQ 5 client's sends checked against the
topic's message type as the proxy checks them (``enableTopicMessageTypeCheck``, ``RouteActivity``'s
accepted types; the sends themselves: test_grpc_protocol.py)."""
from __future__ import annotations

import json
import re

import pytest

from rmqstore.broker import remoting as R
from rmqstore.broker.messaging import routing
from rmqstore.broker.messaging.protocol import pb
from rmqstore.broker.metadata import alter_attributes, parse_attributes, topic_config

C, RC = R.RequestCode, R.ResponseCode
UPDATE_BROKER_CONFIG = 25


def _create(c, topic: str, attributes: str | None = None, queues: int = 2):
    ext = {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6,
           "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"}
    if attributes is not None:
        ext["attributes"] = attributes
    return c.call(C.UPDATE_AND_CREATE_TOPIC, ext)


# --- the attributes' grammar ------------------------------------------------------------------------
def test_attribute_modifications_parse_as_upstream():
    assert parse_attributes(None) == {} and parse_attributes("") == {}
    assert parse_attributes("+message.type=FIFO,-queue.type") == {"+message.type": "FIFO", "-queue.type": ""}
    assert parse_attributes("+a=b=c") == {"+a": "b"}  # (Java's split: the second piece)
    for text, error in [("message.type=FIFO", "add/alter attribute format is wrong: message.type"),
                        ("message.type", "delete attribute format is wrong: message.type"),
                        ("+a=", "Index 1 out of bounds for length 1"),
                        ("+x=1,+x=2", "key duplication: +x")]:
        with pytest.raises(ValueError, match=f"^{re.escape(error)}$"):
            parse_attributes(text)


def test_attributes_alter_as_upstream():
    fifo = {"message.type": "FIFO"}
    assert alter_attributes(True, {}, {"+message.type": "FIFO", "+queue.type": "SimpleCQ"}) == \
        {"message.type": "FIFO", "queue.type": "SimpleCQ"}
    assert alter_attributes(False, fifo, {"+message.type": "DELAY"}) == {"message.type": "DELAY"}
    assert alter_attributes(False, fifo, {"-message.type": ""}) == {}
    assert alter_attributes(False, fifo, {}) == fifo  # no modification keeps them
    assert alter_attributes(False, {}, {"+reserve.time": "-1"}) == {"reserve.time": "-1"}
    for create, current, change, error in [
            (True, {}, {"-message.type": ""}, "only add attribute is supported while creating topic. key: message.type"),
            (False, {}, {"-message.type": ""}, "attempt to delete a nonexistent key: message.type"),
            (False, {}, {"+queue.type": "BatchCQ"}, "attempt to update an unchangeable attribute. key: queue.type"),
            (False, {}, {"+foo": "1"}, "unsupported key: foo"),
            (False, {}, {"+message.type": "fifo"}, r"value is not in set: \[.*FIFO.*\]"),
            (False, {}, {"+reserve.time": "-2"}, r"value is not in range\(-1, 9223372036854775807\)"),
            (False, {}, {"+reserve.time": "soon"}, ".+"),
            (True, {}, {"+a+b": "1"}, r"kv string format wrong\.")]:
        with pytest.raises(ValueError, match=f"^{error}$"):
            alter_attributes(create, current, change)


# --- UPDATE_AND_CREATE_TOPIC --------------------------------------------------------------------------
def test_topic_attributes_are_created_altered_and_kept(start_broker, connect):
    b = start_broker()
    c = connect(b.address)
    assert _create(c, "Orders", "+message.type=FIFO").code == RC.SUCCESS
    assert b.topics.get("Orders")["attributes"] == {"message.type": "FIFO"}  # stored without the sign
    stored = json.loads(open(b.topics.file.path).read())["topicConfigTable"]["Orders"]
    assert stored["attributes"] == {"message.type": "FIFO"}
    assert _create(c, "Orders", queues=4).code == RC.SUCCESS  # no modification: kept
    assert b.topics.get("Orders")["attributes"] == {"message.type": "FIFO"}
    assert b.topics.get("Orders")["readQueueNums"] == 4
    assert _create(c, "Orders", "-message.type").code == RC.SUCCESS
    assert b.topics.get("Orders")["attributes"] == {}
    for attributes, code, remark in [
            ("+message.type=MIXED", RC.INVALID_PARAMETER, "MIXED message type is not supported."),
            ("+queue.type=BatchCQ", RC.SYSTEM_ERROR, "attempt to update an unchangeable attribute. key: queue.type"),
            ("+nope=1", RC.SYSTEM_ERROR, "unsupported key: nope"),
            ("message.type=FIFO", RC.SYSTEM_ERROR, "add/alter attribute format is wrong: message.type")]:
        r = _create(c, "Orders", attributes)
        assert (r.code, r.remark) == (code, remark)
    assert b.topics.get("Orders")["attributes"] == {}  # nothing refused was applied
    r = _create(c, "Fresh", "-message.type")
    assert (r.code, r.remark) == (RC.SYSTEM_ERROR,
                                  "only add attribute is supported while creating topic. key: message.type")
    assert b.topics.get("Fresh") is None


def test_mixed_topics_when_enabled(start_broker, connect):
    b = start_broker(broker={"enableMixedMessageType": "true"})
    c = connect(b.address)
    assert _create(c, "Any", "+message.type=MIXED").code == RC.SUCCESS
    assert routing.topic_message_type(b.topics.get("Any")) == "MIXED"
    # both switches change at once through updateBrokerConfig (UPDATE_BROKER_CONFIG), as upstream reads them
    r = c.call(UPDATE_BROKER_CONFIG, None, b"enableMixedMessageType=false\nenableTopicMessageTypeCheck=false\n")
    assert r.code == RC.SUCCESS, r.remark
    assert not b.cfg.enable_mixed_message_type and not b.cfg.enable_topic_message_type_check
    assert _create(c, "Other", "+message.type=MIXED").code == RC.INVALID_PARAMETER


# --- the RocketMQ 5 endpoint ---------------------------------------------------------------------------
def test_topic_message_types_and_accepted_types():
    assert routing.topic_message_type(topic_config("T", 1)) == "NORMAL"
    assert routing.topic_message_type(dict(topic_config("T", 1), attributes={"+message.type": "FIFO"})) == "FIFO"
    assert routing.topic_message_type(dict(topic_config("T", 1), attributes={"message.type": "odd"})) == "UNSPECIFIED"
    assert routing.accept_types("NORMAL") == [pb.NORMAL] and routing.accept_types("DELAY") == [pb.DELAY]
    assert set(routing.accept_types("MIXED")) == {pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION}
    assert routing.accept_types("UNSPECIFIED") == [pb.MESSAGE_TYPE_UNSPECIFIED]
    # TopicMessageType.parseFromMessageProperty: transaction before delay before FIFO
    assert routing.message_type({"TRAN_MSG": "true", "DELAY": "3", "__SHARDINGKEY": "g"}) == "TRANSACTION"
    assert routing.message_type({"TRAN_MSG": "false", "TIMER_DELIVER_MS": "1", "__SHARDINGKEY": "g"}) == "DELAY"
    assert routing.message_type({"__SHARDINGKEY": "g"}) == "FIFO" and routing.message_type({}) == "NORMAL"
    assert routing.type_conflict("MIXED", {"__SHARDINGKEY": "g"}) is None
    assert routing.type_conflict("NORMAL", {"__SHARDINGKEY": "g", "TRANSFER_FLAG": "true"}) is None
    assert routing.type_conflict("UNSPECIFIED", {}) == \
        "TopicMessageType validate failed, the expected type is UNSPECIFIED, but actual type is NORMAL"
