"""RocketMQ's remoting protocol: ``RemotingCommand`` frames, both header serializations, the codes.

A frame on the wire (big-endian)::

    4  length            bytes after this field (header-length field + header + body)
    4  header length     high byte: serialize type (0 JSON, 1 ROCKETMQ); low 3 bytes: header size
    n  header            JSON object, or the ROCKETMQ binary layout below
    m  body              the rest (length - 4 - n)

The ROCKETMQ binary header: code i16, language u8, version i16, opaque i32, flag i32, remark
(i32 length + UTF-8, length 0 = null), extFields (i32 total length, then per entry i16 key length +
key, i32 value length + value). The JSON header has the same fields by name (``language`` as the
enum's name, ``extFields`` an object whose values are strings, or numbers as some clients send).

``flag`` bit 0 marks a response, bit 1 a oneway request (no response is sent).
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

import javaproperties

from ..errors import RmqStoreError
from ..format.javalang import parse_int, parse_long

#: upstream's ``com.rocketmq.remoting.frameMaxLength`` default: a larger frame closes the connection
MAX_FRAME = 16 * 1024 * 1024
JSON, ROCKETMQ = 0, 1
RESPONSE_FLAG, ONEWAY_FLAG = 1, 2
#: ``MQVersion.Version.V4_9_4.ordinal()``: what this broker reports as its version
VERSION_V4_9_4 = 401

LANGUAGES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS",
             "RUST", "NODE_JS")
_LANGUAGE_CODE = {name: code for code, name in enumerate(LANGUAGES)}
_FIXED = struct.Struct(">hbhii")


class RequestCode:
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    CHECK_CLIENT_CONFIG = 46
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_CONSUME_STATS = 208
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    LITE_PULL_MESSAGE = 361


class ResponseCode:
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    INVALID_PARAMETER = 29
    CONSUMER_NOT_ONLINE = 206


class FrameError(RmqStoreError):
    """A frame that cannot be decoded (the connection that sent it is closed, as upstream does)."""


class HeaderError(RmqStoreError):
    """A request header field missing or malformed (answered SYSTEM_ERROR, as upstream's
    ``RemotingCommandException``)."""


@dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    language: str = "JAVA"
    version: int = VERSION_V4_9_4
    serialize: int = JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    def response(self, code: int = ResponseCode.SUCCESS, remark: str | None = None,
                 ext: dict[str, object] | None = None, body: bytes = b"") -> "RemotingCommand":
        """The answer to this request: same opaque and serialize type, the response flag set."""
        fields = {k: _ext_text(v) for k, v in ext.items() if v is not None} if ext else {}
        return RemotingCommand(code, self.opaque, RESPONSE_FLAG, remark, fields, body, serialize=self.serialize)


def _ext_text(value: object) -> str:
    """An extFields value as Java's ``String.valueOf`` writes it (booleans lower case)."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    return value if isinstance(value, str) else str(value)


def request(code: int, ext: dict[str, object] | None = None, body: bytes = b"", *, opaque: int = 0,
            oneway: bool = False, serialize: int = JSON) -> RemotingCommand:
    """A request command (for the broker's own requests to clients, and for tests)."""
    fields = {k: _ext_text(v) for k, v in ext.items() if v is not None} if ext else {}
    return RemotingCommand(code, opaque, ONEWAY_FLAG if oneway else 0, None, fields, body, serialize=serialize)


# --- encoding ----------------------------------------------------------------------------------
def encode(cmd: RemotingCommand) -> bytes:
    """The whole frame of ``cmd`` (length prefix included)."""
    header = _encode_binary(cmd) if cmd.serialize == ROCKETMQ else _encode_json(cmd)
    return _frame(cmd.serialize, header, cmd.body)


def _frame(serialize: int, header: bytes, body: bytes) -> bytes:
    n = len(header)
    return b"".join(((4 + n + len(body)).to_bytes(4, "big"), ((serialize << 24) | n).to_bytes(4, "big"), header, body))


#: one encoder for every header (``json.dumps`` with options builds a new one per call)
_JSON_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_JSON_DECODE = json.JSONDecoder().decode
try:
    from orjson import loads as _ORJSON_LOADS
except ImportError:  # (a core dependency; the standard library's parser when it is missing)
    _ORJSON_LOADS = None
#: extFields values that make the standard library parse the header again (see _json_object)
_NESTED = {float, dict, list}


def _encode_json(cmd: RemotingCommand) -> bytes:
    code, flag, opaque, version = cmd.code, cmd.flag, cmd.opaque, cmd.version
    if type(code) is int and type(flag) is int and type(opaque) is int and type(version) is int:
        # (the usual answer: the same text as the encoder writes for the whole object, the fixed
        # fields formatted here)
        lang = _LANGUAGE_JSON.get(cmd.language) or _JSON_ENCODE(cmd.language)
        tail = "}" if cmd.remark is None else f',"remark":{_JSON_ENCODE(cmd.remark)}}}'
        return _json_header(code, _JSON_ENCODE(cmd.ext), flag, lang, opaque, f"{version}{tail}")
    doc: dict[str, object] = {"code": code, "extFields": cmd.ext, "flag": flag, "language": cmd.language,
                              "opaque": opaque, "serializeTypeCurrentRPC": "JSON", "version": version}
    if cmd.remark is not None:
        doc["remark"] = cmd.remark
    return _JSON_ENCODE(doc).encode()


_LANGUAGE_JSON = {name: f'"{name}"' for name in LANGUAGES}


def json_string(text: str) -> str:
    """``text`` as a JSON string, escaped as :func:`encode` escapes the values of a JSON header."""
    return f'"{text}"' if text.isalnum() and text.isascii() else _JSON_ENCODE(text)


def json_answer_frame(code: int, opaque: int, ext_json: str) -> bytes:
    """The whole frame of a JSON answer without remark or body (the response flag, language JAVA,
    version :data:`VERSION_V4_9_4`) whose extFields' JSON text is ``ext_json``: the bytes
    :func:`encode` writes for that command, for a handler that formats its extFields itself (a
    send's answer) instead of building the command."""
    return _frame(JSON, _json_header(code, ext_json, RESPONSE_FLAG, '"JAVA"', opaque, f"{VERSION_V4_9_4}}}"), b"")


def _json_header(code: int, ext_json: str, flag: int, lang_json: str, opaque: int, version_tail: str) -> bytes:
    """A JSON header's text in the encoder's key order, its extFields and language given as JSON and
    ``version_tail`` the version and what closes the object (the remark, when there is one)."""
    return (f'{{"code":{code},"extFields":{ext_json},"flag":{flag},"language":{lang_json},"opaque":{opaque},'
            f'"serializeTypeCurrentRPC":"JSON","version":{version_tail}').encode()


def _encode_binary(cmd: RemotingCommand) -> bytes:
    parts = [_FIXED.pack(_i16(cmd.code), _LANGUAGE_CODE.get(cmd.language, 0), _i16(cmd.version), cmd.opaque,
                         cmd.flag)]
    remark = cmd.remark.encode() if cmd.remark else b""
    parts += [len(remark).to_bytes(4, "big"), remark]
    ext = []
    for k, v in cmd.ext.items():
        kb, vb = k.encode(), v.encode()
        ext += [len(kb).to_bytes(2, "big"), kb, len(vb).to_bytes(4, "big"), vb]
    ext_bytes = b"".join(ext)
    parts += [len(ext_bytes).to_bytes(4, "big"), ext_bytes]
    return b"".join(parts)


def _i16(v: int) -> int:
    """A Java ``(short)`` cast."""
    return ((v + 0x8000) & 0xFFFF) - 0x8000


# --- decoding ----------------------------------------------------------------------------------
def decode(frame: bytes | memoryview) -> RemotingCommand:
    """A command from one frame without its length prefix; :class:`FrameError` when malformed."""
    if len(frame) < 4:
        raise FrameError(f"frame of {len(frame)} bytes: shorter than its 4-byte header length")
    word = int.from_bytes(frame[:4], "big")
    kind, header_len = word >> 24, word & 0xFFFFFF
    if header_len > len(frame) - 4:
        raise FrameError(f"bad header length {header_len}: the frame holds {len(frame) - 4} bytes after it")
    header = bytes(frame[4:4 + header_len])
    if kind == JSON:
        cmd = _decode_json(header)
    elif kind == ROCKETMQ:
        cmd = _decode_binary(header)
    else:
        raise FrameError(f"unknown serialize type {kind} (expected 0 JSON or 1 ROCKETMQ)")
    cmd.body = bytes(frame[4 + header_len:])
    return cmd


def _decode_json(header: bytes) -> RemotingCommand:
    doc, ext_types = _json_object(header)
    try:
        ext = doc.get("extFields") or {}
        if type(ext) is not dict:
            raise TypeError("extFields is not an object")
        if ext_types is None:
            ext_types = set(map(type, ext.values()))
        if ext_types and ext_types != _STR_ONLY:  # (clients send numbers too: the C++ client's queueId, flag, ...)
            ext = {k: v if type(v) is str else str(v) if type(v) is int else _json_text(v)
                   for k, v in ext.items() if v is not None}
        code, opaque, flag, version = doc.get("code", 0), doc.get("opaque", 0), doc.get("flag", 0), doc.get("version", 0)
        if not (type(code) is int and type(opaque) is int and type(flag) is int and type(version) is int):
            code, opaque, flag, version = _json_int(code), _json_int(opaque), _json_int(flag), _json_int(version)
        remark = doc.get("remark")
        return RemotingCommand(code, opaque, flag, None if remark is None else str(remark), ext, b"",
                               str(doc.get("language") or "JAVA"), version, JSON)
    except (TypeError, ValueError) as e:
        raise FrameError(f"bad JSON header: {e}") from None


_STR_ONLY = {str}


def _json_object(header: bytes) -> tuple[dict, set | None]:
    """The header's JSON object: orjson's parse (several times faster) when it takes the text and
    holds no float, else the standard library's, which also takes what orjson refuses (lone
    surrogates as fastjson writes them, NaN) and keeps integers past 64 bits exact: the same
    object either way. Also the types of the extFields' values when they were looked at (orjson)."""
    doc = ext_types = None
    if _ORJSON_LOADS is not None:
        try:
            doc = _ORJSON_LOADS(header)
        except ValueError:
            pass
        else:
            ext = doc.get("extFields") if type(doc) is dict else None
            if type(ext) is dict:
                ext_types = set(map(type, ext.values()))
            if type(doc) is dict and (float in set(map(type, doc.values())) or ext_types and _NESTED & ext_types):
                doc = ext_types = None  # (orjson reads an integer past 64 bits as a float)
    if doc is None:
        try:
            doc = json.loads(header) if header[:1] != b"{" else _JSON_DECODE(header.decode("utf-8", "surrogatepass"))
        except (ValueError, UnicodeDecodeError) as e:
            raise FrameError(f"header is not JSON: {e}") from None
    if type(doc) is not dict:
        raise FrameError(f"header is JSON {type(doc).__name__}, expected an object")
    return doc, ext_types


def _json_int(v: object) -> int:
    if type(v) is int:
        return v
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise TypeError(f"{v!r} is not an int")
    return int(v)


def _json_text(v: object) -> str:
    """A JSON extFields value as a string, as fastjson converts it into ``HashMap<String, String>``."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    return json.dumps(v, separators=(",", ":"))


def _decode_binary(header: bytes) -> RemotingCommand:
    n = len(header)
    if n < _FIXED.size + 8:
        raise FrameError(f"ROCKETMQ header of {n} bytes: shorter than its fixed {_FIXED.size + 8} bytes")
    code, lang, version, opaque, flag = _FIXED.unpack_from(header)
    pos = _FIXED.size
    remark, pos = _read_str(header, pos, 4, n)
    ext_len = int.from_bytes(header[pos:pos + 4], "big", signed=True)
    pos += 4
    if ext_len < 0 or pos + ext_len > n:
        raise FrameError(f"extFields length {ext_len} at header byte {pos - 4} runs past the {n}-byte header")
    ext: dict[str, str] = {}
    end = pos + ext_len
    while pos < end:
        k, pos = _read_str(header, pos, 2, end)
        v, pos = _read_str(header, pos, 4, end)
        if k is not None and v is not None:
            ext[k] = v
    language = LANGUAGES[lang] if 0 <= lang < len(LANGUAGES) else "OTHER"
    return RemotingCommand(code, opaque, flag, remark, ext, language=language, version=version, serialize=ROCKETMQ)


def _read_str(buf: bytes, pos: int, width: int, limit: int) -> tuple[str | None, int]:
    if pos + width > limit:
        raise FrameError(f"string length at header byte {pos} runs past the header")
    n = int.from_bytes(buf[pos:pos + width], "big", signed=True)
    pos += width
    if n == 0:
        return None, pos
    if n < 0 or pos + n > limit:
        raise FrameError(f"string of {n} bytes at header byte {pos - width} runs past the header")
    try:
        return buf[pos:pos + n].decode(), pos + n
    except UnicodeDecodeError as e:
        raise FrameError(f"string at header byte {pos} is not UTF-8: {e}") from None


class FrameReader:
    """Cuts a byte stream into frames. ``feed`` returns the complete frames (without their length
    prefix); a length below 4 or above ``max_frame`` raises :class:`FrameError` (the connection is
    then closed, as upstream's frame decoder does). It holds at most one partial frame."""

    def __init__(self, max_frame: int = MAX_FRAME):
        self.max_frame = max_frame
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        if not buf and len(data) >= 4:  # (the usual read: one whole frame, nothing pending)
            length = int.from_bytes(data[:4], "big", signed=True)
            if length == len(data) - 4 and 4 <= length <= self.max_frame:
                return [bytes(data[4:])]
        buf += data
        out: list[bytes] = []
        pos, n = 0, len(buf)
        while n - pos >= 4:
            length = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
            if length < 4 or length > self.max_frame:
                raise FrameError(f"frame length {length} (expected 4 to {self.max_frame})")
            if n - pos - 4 < length:
                break
            out.append(bytes(buf[pos + 4:pos + 4 + length]))
            pos += 4 + length
        if pos:
            del buf[:pos]
        return out

    @property
    def pending(self) -> int:
        return len(self._buf)


class Header:
    """Typed access to a request's ``extFields``, parsed as upstream's header classes parse them
    (``Integer.parseInt``/``Long.parseLong``, ``Boolean.parseBoolean``); a missing required field
    or a malformed number raises :class:`HeaderError`."""

    __slots__ = ("fields",)
    _MISSING = object()

    def __init__(self, cmd: RemotingCommand):
        self.fields = cmd.ext

    def str(self, name: str, default=_MISSING):
        v = self.fields.get(name)
        if v is None:
            if default is Header._MISSING:
                raise HeaderError(f"the custom field <{name}> is null")
            return default
        return v

    def int(self, name: str, default=_MISSING, *, bits: int = 32):
        v = self.fields.get(name)
        if v is None:
            if default is Header._MISSING:
                raise HeaderError(f"the custom field <{name}> is null")
            return default
        try:
            return parse_int(v) if bits == 32 else parse_long(v)
        except ValueError as e:
            raise HeaderError(f"the custom field <{name}>: {e}") from None

    def long(self, name: str, default=_MISSING):
        return self.int(name, default, bits=64)

    def bool(self, name: str, default: bool = False) -> bool:
        v = self.fields.get(name)
        return default if v is None else v.lower() == "true"


def config_text(settings: dict) -> bytes:
    """``Configuration.getAllConfigsFormatString``: sorted ``key=value`` lines (the body of the
    broker's and the name server's config answers)."""
    return "".join(f"{k}={v}\n" for k, v in sorted(settings.items())).encode()


def config_update(cmd: "RemotingCommand", black_list) -> tuple[dict, "RemotingCommand | None"]:
    """The properties of an UPDATE_BROKER_CONFIG / UPDATE_NAMESRV_CONFIG body, or upstream's refusal:
    SYSTEM_ERROR for a body that does not parse, NO_PERMISSION for a key in ``black_list``."""
    try:
        props = javaproperties.loads(cmd.body.decode("utf-8")) if cmd.body else {}
    except (ValueError, UnicodeDecodeError) as e:
        return {}, cmd.response(ResponseCode.SYSTEM_ERROR, f"string2Properties error: {e}")
    if set(black_list) & set(props):
        return props, cmd.response(ResponseCode.NO_PERMISSION, "Can not update config in black list.")
    return props, None
