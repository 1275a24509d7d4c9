"""Writing commands: ``send`` one message, ``load`` a JSON Lines file. Both take the store's lock
(fail with exit 4 while a broker or another writer has it open) and wait until what they wrote is
in the consume queues and the index before returning."""
from __future__ import annotations

import base64
import binascii
import json
import os
import shutil
import tempfile
import time
from typing import Any, Iterator

import click

from .common import KEY_VALUE, StoreCommand, store_options
from .errors import PutFailedError, UsageProblem
from .render import fmt_ts, kv_table

CREATE = click.option("--create", is_flag=True,
                      help="Create the store if the directory is missing or empty (otherwise that is an error).")


def _put_result_dict(r, msg) -> dict[str, Any]:
    props = dict(msg.properties.items() if hasattr(msg.properties, "items") else (msg.properties or []))
    return {"status": r.status.value, "msg_id": r.msg_id, "uniq_key": props.get("UNIQ_KEY"), "topic": msg.topic,
            "queue_id": msg.queue_id, "queue_offset": r.queue_offset, "phy_offset": r.phy_offset,
            "wrote_bytes": r.wrote_bytes, "store_timestamp": r.store_timestamp, "error": r.error}


# ---------------------------------------------------------------------------------------------
# send
# ---------------------------------------------------------------------------------------------
@click.command()
@click.argument("topic")
@click.argument("body", required=False)
@click.option("--body-file", type=click.File("rb"), default=None, help="Read the body from this file ('-' = stdin).")
@click.option("--tags", default=None, help="TAGS property (one tag, as a producer sets it).")
@click.option("--keys", "keys", multiple=True, help="A business key (repeatable; spaces separate keys too).")
@click.option("--property", "props", type=KEY_VALUE, multiple=True, help="A user property NAME=VALUE (repeatable).")
@click.option("--queue", "-q", "queue_id", type=click.IntRange(0), default=0, show_default=True, help="Queue id.")
@click.option("--flag", type=int, default=0, show_default=True, help="The message's int flag.")
@CREATE
@store_options
def send(cmd: StoreCommand, topic: str, body: str | None, body_file, tags: str | None, keys: tuple[str, ...],
         props: tuple[tuple[str, str], ...], queue_id: int, flag: int, create: bool) -> None:
    """Append one message to the store (WRITES: takes the store lock).

    Like a producer: TAGS, KEYS and a new UNIQ_KEY are set; BODY is UTF-8 text, or use --body-file
    for bytes. Prints the msg id, commitlog offset and queue offset.
    """
    from .. import Message

    if (body is None) == (body_file is None):
        raise UsageProblem("give the body either as the BODY argument or with --body-file (exactly one)",
                           hint="e.g. rmqstore send TopicTest 'hello' or --body-file payload.bin")
    data = body.encode("utf-8") if body is not None else body_file.read()
    key_list = [k for arg in keys for k in arg.split(" ") if k]
    msg = Message.create(topic, data, tags=tags, keys=key_list or None, queue_id=queue_id,
                         properties=dict(props) if props else None, flag=flag)
    with cmd.open_write(create=create) as st:
        r = st.put_message(msg)
        if r.ok:
            st.wait_dispatched()
    d = _put_result_dict(r, msg)
    if cmd.json:
        cmd.out.emit(d)
    else:
        cmd.out.print(kv_table(f"send {topic}: {d['status']}",
                               [(k, fmt_ts(v) if k == "store_timestamp" else v) for k, v in d.items()
                                if v is not None or k != "error"]))
    if not r.ok:
        raise PutFailedError(f"the store refused the message: {r.status.value}" + (f" ({r.error})" if r.error else ""),
                             hint="e.g. a body over maxMessageSize or properties over 32767 bytes")


# ---------------------------------------------------------------------------------------------
# load
# ---------------------------------------------------------------------------------------------
_ALIASES = {
    "queueId": "queue_id", "sysFlag": "sys_flag", "bornTimestamp": "born_timestamp", "bornHost": "born_host",
    "storeTimestamp": "store_timestamp", "storeHost": "store_host", "reconsumeTimes": "reconsume_times",
    "preparedTransactionOffset": "prepared_transaction_offset", "uniqKey": "uniq_key",
}
_INT_FIELDS = ("queue_id", "flag", "sys_flag", "born_timestamp", "store_timestamp", "reconsume_times",
               "prepared_transaction_offset")
_KNOWN = set(_INT_FIELDS) | {"topic", "body", "body_base64", "body_hex", "body_encoding", "tags", "keys", "uniq_key",
                             "properties", "born_host", "store_host"}
#: fields of the message object (``browse --json``, ``export --format jsonl``) that describe where a
#: record was or what the store derived from it: read past, the new store decides them again
_DERIVED = {"msg_id", "queue_offset", "phy_offset", "store_size", "tags_code", "sys_flag_bits", "compression",
            "body_crc", "body_size", "body_note"}
_COMPRESSION_BITS = 0x1 | 0x700  # COMPRESSED_FLAG and the compression type


def _body(obj: dict) -> bytes:
    given = [k for k in ("body", "body_base64", "body_hex") if k in obj]
    if len(given) > 1:
        raise ValueError(f"give one of body, body_base64, body_hex (got {', '.join(given)})")
    if "body_base64" in obj:
        return base64.b64decode(obj["body_base64"], validate=True)
    if "body_hex" in obj:
        return bytes.fromhex(obj["body_hex"])
    b = obj.get("body", "")
    enc = obj.get("body_encoding")
    if enc is not None:
        if not isinstance(b, str):
            raise ValueError("body must be a string when body_encoding is given")
        if enc == "utf-8":
            return b.encode("utf-8")
        if enc == "hex":
            return bytes.fromhex(b)
        if enc == "base64":
            return base64.b64decode(b, validate=True)
        raise ValueError(f"body_encoding must be utf-8, hex or base64, got {enc!r}")
    if isinstance(b, str):
        return b.encode("utf-8")
    if isinstance(b, dict):
        if "text" in b:
            return str(b["text"]).encode("utf-8")
        if "base64" in b:
            return base64.b64decode(b["base64"], validate=True)
        if "hex" in b:
            return bytes.fromhex(b["hex"])
        if "repeat" in b:
            return str(b["repeat"]).encode("utf-8") * int(b.get("count", 1))
    raise ValueError("body must be a string or an object with text, base64, hex or repeat+count")


def message_from_json(obj: Any, *, add_uniq_key: bool):
    """A :class:`~rmqstore.Message` in replay form from one JSONL object: nothing is added that the
    line does not say (except a fresh UNIQ_KEY with ``add_uniq_key``), so a load is reproducible."""
    from .. import Message

    if not isinstance(obj, dict):
        raise ValueError("each line must be a JSON object")
    obj = {_ALIASES.get(k, k): v for k, v in obj.items()}
    shown_decoded = obj.get("compression") is not None and "body_note" not in obj
    obj = {k: v for k, v in obj.items() if k not in _DERIVED}
    unknown = sorted(set(obj) - _KNOWN)
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(unknown)}")
    topic = obj.get("topic")
    if not isinstance(topic, str) or not topic:
        raise ValueError("topic (a non-empty string) is required")
    extra = obj.get("properties") or []
    if isinstance(extra, dict):
        extra = list(extra.items())
    given: list[tuple[str, str]] = []
    for pair in extra:
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
            raise ValueError("properties must be an object or a list of [name, value] pairs")
        given.append((str(pair[0]), str(pair[1])))
    in_props = dict(given)
    props: list[tuple[str, str]] = []
    keys = obj.get("keys")
    for field, name, value in (("tags", "TAGS", obj.get("tags")),
                               ("keys", "KEYS", None if keys is None or keys == [] else
                                keys if isinstance(keys, str) else " ".join(map(str, keys))),
                               ("uniq_key", "UNIQ_KEY", obj.get("uniq_key"))):
        if value is None:
            continue
        if name in in_props:  # a message object: properties hold it already (in stored order)
            if in_props[name] != str(value) and not (name == "KEYS" and in_props[name].split() == str(value).split()):
                raise ValueError(f"{field} {value!r} disagrees with properties {name}={in_props[name]!r}")
            continue
        props.append((name, str(value)))
    props += given
    names = [n for n, _ in props]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"property given twice: {', '.join(dup)}")
    if add_uniq_key and "UNIQ_KEY" not in names:
        uk = Message.create(topic, b"").properties["UNIQ_KEY"]
        props.append(("UNIQ_KEY", uk))
    kw: dict[str, Any] = {}
    for f in _INT_FIELDS:
        if obj.get(f) is not None:
            v = obj[f]
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"{f} must be an integer, got {v!r}")
            kw[f] = v
    for f in ("born_host", "store_host"):
        if obj.get(f) is not None:
            kw[f] = str(obj[f])
    if shown_decoded and "sys_flag" in kw:  # browse shows a compressed body decoded: store it as such
        kw["sys_flag"] &= ~_COMPRESSION_BITS
    return Message(topic=topic, body=_body(obj), properties=props, **kw)


def _lines(path: str) -> Iterator[tuple[int, str, int]]:
    """(line number, text, bytes consumed so far)."""
    done = 0
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            done += len(raw)
            line = raw.decode("utf-8").strip()
            if line and not line.startswith("#"):
                yield n, line, done


def _parse(path: str, shown: str, add_uniq_key: bool) -> Iterator[tuple[int, Any, int]]:
    for n, line, done in _lines(path):
        try:
            yield n, message_from_json(json.loads(line), add_uniq_key=add_uniq_key), done
        except (ValueError, TypeError, binascii.Error) as e:
            raise UsageProblem(f"{shown}:{n}: {e}", hint="see the JSONL line format in `rmqstore load --help`") from e


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--uniq-keys", is_flag=True, help="Give lines without a UNIQ_KEY a fresh one, as a producer would "
                                                "(the load is then no longer byte-reproducible).")
@CREATE
@store_options
def load(cmd: StoreCommand, file: str, uniq_keys: bool, create: bool) -> None:
    """Bulk-import messages from a JSON Lines file ('-' = stdin) (WRITES: takes the store lock).

    \b
    One JSON object per line (blank lines and lines starting with # are skipped):
      {"topic": "T", "body": "text", "queue_id": 0, "tags": "TagA", "keys": ["k1", "k2"],
       "uniq_key": "...", "properties": {"NAME": "VALUE"} or [["NAME", "VALUE"], ...],
       "flag": 0, "sys_flag": 0, "born_timestamp": MS, "born_host": "ip:port",
       "store_timestamp": MS, "store_host": "ip:port", "reconsume_times": 0,
       "prepared_transaction_offset": 0}
    Only topic is required. body may also be body_base64, body_hex, or {"text"|"base64"|"hex": ...}
    or {"repeat": "ab", "count": N}; camelCase names (queueId, storeTimestamp, ...) work too, so
    RocketMQ test-vector messages load as they are. Properties are written in the order given
    (TAGS, KEYS, UNIQ_KEY first) and nothing is added, so loading the same file with fixed
    timestamps and hosts into a new store gives the same bytes. The whole file is checked before
    the first message is written; the load stops at the first message the store refuses (exit 13).
    """
    cmd.refuse_if_locked()  # at once, before the input is read
    path, shown, tmp = _input(file)
    try:
        d, secs = _load(cmd, path, shown, uniq_keys, create)
    finally:
        if tmp is not None:
            os.unlink(tmp)
    if cmd.json:
        cmd.out.emit(d)
    else:
        loaded = d["messages"]
        rate = f"{loaded / secs:,.0f} messages/s" if secs > 0 else "-"
        cmd.out.print(kv_table(f"loaded {loaded:,} messages from {shown} ({rate})", list(d.items())))


def _input(file: str) -> tuple[str, str, str | None]:
    """The file to read, its name in messages, and the temporary file stdin ('-') was copied to."""
    if file != "-":
        if not os.path.isfile(file):
            raise UsageProblem(f"input file {file!r} does not exist")
        return file, file, None
    fd, tmp = tempfile.mkstemp(prefix="rmqstore-load-", suffix=".jsonl")
    try:
        with os.fdopen(fd, "wb") as out:
            with click.open_file("-", "rb") as stdin:
                shutil.copyfileobj(stdin, out)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp, "<stdin>", tmp


def _load(cmd: StoreCommand, path: str, shown: str, uniq_keys: bool, create: bool) -> tuple[dict, float]:
    """Check every line of ``path``, then put its messages; what was loaded, and the seconds it took."""
    total = os.path.getsize(path)
    count = 0
    with cmd.out.status(f"checking {shown}"):
        for _ in _parse(path, shown, False):
            count += 1
    t0 = time.perf_counter()
    loaded = wrote = 0
    first_phy = end_phy = None
    with cmd.open_write(create=create) as st, cmd.out.progress(f"loading {shown}", total, unit="bytes") as bar:
        for n, msg, done in _parse(path, shown, uniq_keys):
            r = st.put_message(msg)
            if not r.ok:
                raise PutFailedError(f"{shown}:{n}: the store refused the message: {r.status.value}"
                                     + (f" ({r.error})" if r.error else "")
                                     + f"; {loaded} messages before it were loaded",
                                     hint="fix or remove that line, then load the rest")
            loaded += 1
            wrote += r.wrote_bytes
            first_phy = r.phy_offset if first_phy is None else first_phy
            end_phy = r.phy_offset + r.wrote_bytes
            bar.update(done)
        st.wait_dispatched()
    secs = time.perf_counter() - t0
    return {"file": shown, "messages": loaded, "bytes": wrote, "first_phy_offset": first_phy,
            "end_phy_offset": end_phy, "seconds": round(secs, 3)}, secs


COMMANDS = [send, load]
