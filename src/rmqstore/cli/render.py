"""Output: rich tables for people, JSON for scripts, progress on stderr.

Conventions (documented in the CLI reference):
* times in tables are local time with the epoch milliseconds beside them; JSON carries epoch ms;
* bodies are text when they are valid UTF-8, else hex (``body_encoding`` says which);
* progress bars and spinners go to stderr and only when stderr is a terminal.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import enum
import json
import math
import os
import time
from typing import Any, Iterable, Iterator, Mapping, Sequence

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ..format.compression import describe_sys_flag
from ..types import MessageRecord

#: a time cell wraps between the local time and the epoch ms, never inside the local time
TIME_MIN_WIDTH = 23


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------
def local_time(ms: int) -> str:
    t = dt.datetime.fromtimestamp(ms // 1000)
    return t.strftime("%Y-%m-%d %H:%M:%S") + f".{ms % 1000:03d}"


def fmt_ts(ms: int | None) -> str:
    """``2023-11-14 23:13:20.037 (1700000000037)`` in local time; ``-`` for none (None or < 0)."""
    if ms is None or ms < 0:
        return "-"
    try:
        return f"{local_time(ms)} ({ms})"
    except (OverflowError, OSError, ValueError):
        return f"({ms})"


def tz_note() -> str:
    return f"times: local ({time.strftime('%Z') or 'local'}), epoch ms in brackets"


def decode_body(body: bytes) -> tuple[str, str]:
    """``("utf-8", text)`` when the body is valid UTF-8, else ``("hex", lowercase hex)``."""
    try:
        return "utf-8", body.decode("utf-8")
    except UnicodeDecodeError:
        return "hex", body.hex()


def body_preview(body: bytes, width: int = 48) -> str:
    enc, text = decode_body(body)
    if enc == "hex":
        text = "hex:" + text
    else:
        text = text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text
    return text if len(text) <= width else text[: width - 1] + "…"


def hexdump(data: bytes) -> str:
    lines = []
    for i in range(0, len(data), 16):
        chunk = data[i:i + 16]
        hx = " ".join(f"{b:02x}" for b in chunk)
        asc = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{i:08x}  {hx:<47}  |{asc}|")
    return "\n".join(lines)


def fmt_bytes(n: int | float | None) -> str:
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def shown_body(rec, stored: bool = False) -> tuple[bytes, str | None]:
    """``(bytes to show, why they are the stored ones or None)``: the producer's bytes of a
    compressed body (``decoded_body``), or the stored bytes when asked or when they do not
    decompress."""
    if stored or not rec.sys_flag & 1:
        return bytes(rec.body), None
    try:
        return rec.decoded_body, None
    except ImportError as e:
        return bytes(rec.body), str(e)
    except ValueError as e:  # CompressionError: damaged compressed bytes are shown as stored
        return bytes(rec.body), f"stored bytes shown: {e}"


def compression_label(rec) -> str | None:
    """``"zlib"``/``"lz4"``/``"zstd"``, ``"unknown type N"``, or None for a body stored as is."""
    return describe_sys_flag(rec.sys_flag)["compression"]


def record_dict(rec, *, include_body: bool = True, stored_body: bool = False) -> dict[str, Any]:
    """The JSON form of a stored message (``MessageRecord``); every field, times in epoch ms. A
    compressed body is shown decoded (``stored_body`` keeps the stored bytes); ``body_size`` is the
    stored size either way."""
    d: dict[str, Any] = {
        "msg_id": rec.msg_id,
        "uniq_key": rec.uniq_key,
        "topic": rec.topic,
        "queue_id": rec.queue_id,
        "queue_offset": rec.queue_offset,
        "phy_offset": rec.phy_offset,
        "store_size": rec.store_size,
        "tags": rec.tags,
        "tags_code": rec.tags_code,
        "keys": list(rec.keys),
        "flag": rec.flag,
        "sys_flag": rec.sys_flag,
        "sys_flag_bits": describe_sys_flag(rec.sys_flag),
        "compression": compression_label(rec),
        "body_crc": rec.body_crc,
        "born_timestamp": rec.born_timestamp,
        "born_host": rec.born_host,
        "store_timestamp": rec.store_timestamp,
        "store_host": rec.store_host,
        "reconsume_times": rec.reconsume_times,
        "prepared_transaction_offset": rec.prepared_transaction_offset,
        "properties": dict(rec.properties),
        "body_size": len(rec.body),
    }
    if include_body:
        body, note = shown_body(rec, stored_body)
        d["body_encoding"], d["body"] = decode_body(body)
        if note:
            d["body_note"] = note
    return d


def to_jsonable(obj: Any) -> Any:
    """Plain JSON types from dataclasses, enums, numpy scalars, bytes, paths, sets and tuples."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, MessageRecord):
        return to_jsonable(obj.as_dict())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj).hex()
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, (dt.datetime, dt.date)):
        return obj.isoformat()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if getattr(obj, "ndim", 0) and callable(getattr(obj, "tolist", None)):  # numpy array (.item() refuses)
        return to_jsonable(obj.tolist())
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalar
        return to_jsonable(obj.item())
    if hasattr(obj, "tolist") and callable(obj.tolist):
        return to_jsonable(obj.tolist())
    return str(obj)


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------
class _NoProgress:
    def update(self, completed: float) -> None:
        pass

    def advance(self, n: float = 1) -> None:
        pass


class _Bar:
    def __init__(self, progress: Progress, task):
        self._p, self._t = progress, task

    def update(self, completed: float) -> None:
        self._p.update(self._t, completed=completed)

    def advance(self, n: float = 1) -> None:
        self._p.advance(self._t, n)


class Output:
    """Where a command's results go: ``--json`` documents, or rich tables on stdout."""

    def __init__(self, json_mode: bool):
        self.json = json_mode
        self._console: Console | None = None
        self._err: Console | None = None

    @property
    def console(self) -> Console:
        if self._console is None:
            width = None
            if not os.environ.get("COLUMNS"):
                probe = Console()
                if not probe.is_terminal:
                    width = 200  # pipes and files: do not squeeze tables into 80 columns
            self._console = Console(width=width, highlight=False)
        return self._console

    @property
    def err(self) -> Console:
        if self._err is None:
            self._err = Console(stderr=True, highlight=False)
        return self._err

    # --- JSON ----------------------------------------------------------------------------------
    def emit(self, obj: Any) -> None:
        click.echo(json.dumps(to_jsonable(obj), indent=2, ensure_ascii=False))

    def emit_line(self, obj: Any) -> None:
        """One JSON document on one line (JSON Lines, for streams)."""
        click.echo(json.dumps(to_jsonable(obj), ensure_ascii=False, separators=(",", ":")))

    # --- text ----------------------------------------------------------------------------------
    def print(self, *renderables: Any, **kw) -> None:
        self.console.print(*renderables, **kw)

    def text(self, s: str, style: str | None = None) -> None:
        self.console.print(Text(s, style=style) if style else Text(s))

    def warn(self, message: str) -> None:
        click.echo(f"warning: {message}", err=True)

    # --- progress ------------------------------------------------------------------------------
    def _live_console(self) -> Console | None:
        """Where a live display may go without mixing into data: the stdout console when it is a
        terminal showing tables (lines printed through it appear above the bar), else stderr when
        that is a terminal, else nowhere."""
        if not self.json and self.console.is_terminal:
            return self.console
        if self.err.is_terminal and not self.console.is_terminal:
            return self.err
        return None

    @contextlib.contextmanager
    def progress(self, description: str, total: float | None, *, unit: str = "items") -> Iterator[Any]:
        """A transient progress bar (only on a terminal); yields an object with update/advance."""
        con = self._live_console()
        if con is None:
            yield _NoProgress()
            return
        counter = DownloadColumn() if unit == "bytes" else MofNCompleteColumn()
        cols = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), counter,
                TimeElapsedColumn(), TimeRemainingColumn()]
        with Progress(*cols, console=con, transient=True, redirect_stdout=False, redirect_stderr=False) as p:
            yield _Bar(p, p.add_task(description, total=total))

    @contextlib.contextmanager
    def status(self, message: str) -> Iterator[None]:
        """A transient spinner (only on a terminal) while something without progress reporting runs."""
        con = self._live_console()
        if con is None:
            yield
            return
        with con.status(message):
            yield


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------
NARROW = 170  # below this many columns, tables drop or merge columns instead of squeezing them


def records_table(records: Iterable, *, width: int, title: str | None = None, caption: str | None = None) -> Table:
    """Messages as a table: every column on a wide console; on a narrow one the position columns
    are merged and the msg id left out (``print`` and ``--json`` show everything)."""
    t = Table(title=title, caption=caption)
    wide = width >= NARROW
    if wide:
        for c in ("topic", "queue", "queue offset", "phy offset"):
            t.add_column(c, justify="left" if c == "topic" else "right", no_wrap=True)
    else:
        t.add_column("message")  # topic:queue:queue offset, then the phy offset
    t.add_column("store time", min_width=TIME_MIN_WIDTH)
    t.add_column("tags")
    t.add_column("keys")
    if wide:
        t.add_column("msg id", no_wrap=True)
    t.add_column("body", overflow="fold", min_width=10)
    preview = 60 if wide else max(8, min(60, width - 75))  # what is left after the other columns
    for r in records:
        where = ([escape(r.topic), str(r.queue_id), str(r.queue_offset), str(r.phy_offset)] if wide else
                 [Text(f"{r.topic}:{r.queue_id}:{r.queue_offset}\nphy {r.phy_offset}")])
        t.add_row(*where, fmt_ts(r.store_timestamp), escape(r.tags or ""), escape(" ".join(r.keys)),
                  *([r.msg_id] if wide else []), Text(body_preview(shown_body(r)[0], preview)))
    return t


def record_detail(out: Output, rec, *, body_as: str = "auto") -> None:
    """Every field of one message, then its body (text, or a hex dump)."""
    t = Table(title=f"message {rec.msg_id}", show_header=True, caption=tz_note())
    t.add_column("field", style="bold", no_wrap=True)
    t.add_column("value", overflow="fold")
    rows = [
        ("msg id (offsetMsgId)", rec.msg_id),
        ("unique key (UNIQ_KEY)", rec.uniq_key or "-"),
        ("topic", rec.topic),
        ("queue id", rec.queue_id),
        ("queue offset", rec.queue_offset),
        ("phy offset", rec.phy_offset),
        ("store size", rec.store_size),
        ("tags", rec.tags or "-"),
        ("tags code", rec.tags_code),
        ("keys", " ".join(rec.keys) or "-"),
        ("flag", rec.flag),
        ("sys flag", f"{rec.sys_flag} (0x{rec.sys_flag:x}: " + ", ".join(
            f"{k} {v}" for k, v in describe_sys_flag(rec.sys_flag).items() if v not in (False, None)) + ")"),
        ("body crc", rec.body_crc),
        ("born time", fmt_ts(rec.born_timestamp)),
        ("born host", rec.born_host),
        ("store time", fmt_ts(rec.store_timestamp)),
        ("store host", rec.store_host),
        ("reconsume times", rec.reconsume_times),
        ("prepared tx offset", rec.prepared_transaction_offset),
    ]
    for k, v in rec.properties.items():
        rows.append((f"property {k}", v))
    body, note = shown_body(rec, stored=body_as == "stored")
    enc, text = decode_body(body)
    if rec.sys_flag & 1:
        rows.append(("compression", f"{compression_label(rec)}: {len(rec.body)} bytes stored, "
                                    f"{'shown as stored' if note or body_as == 'stored' else f'{len(body)} decoded'}"))
    if note:
        rows.append(("body note", note))
    if body_as in ("hex", "stored"):
        enc = "hex"
    elif body_as == "text":
        enc, text = "utf-8", body.decode("utf-8", errors="replace")
    rows.append(("body", f"{len(body)} bytes, shown as {'text' if enc == 'utf-8' else 'hex'}"))
    for k, v in rows:
        t.add_row(escape(str(k)), Text(str(v)))
    out.print(t)
    out.print(Rule(f"body ({len(body)} bytes)", align="left", style="dim"))
    if enc == "utf-8":
        out.print(Text(text))
    else:
        out.print(Text(hexdump(body)))


def _cell(key: str, value: Any) -> str:
    """A value for a generic table: times (``*_timestamp`` keys) as local time + epoch ms, floats
    rounded, lists joined."""
    if value is None:
        return "-"
    if key.endswith("timestamp") and isinstance(value, int) and not isinstance(value, bool):
        return fmt_ts(value)
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))
    if isinstance(value, list):
        return ", ".join(map(str, value)) if value else "-"
    return str(value)


def kv_table(title: str | None, rows: Sequence[tuple[str, Any]]) -> Table:
    t = Table(title=title, show_header=False)
    t.add_column("key", style="bold", no_wrap=True)
    t.add_column("value", overflow="fold")
    for k, v in rows:
        t.add_row(escape(str(k)), Text(_cell(str(k), v)))
    return t


def _flatten(prefix: str, value: Any, scalars: list, tables: list) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, scalars, tables)
    elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        tables.append((prefix, value))
    else:
        scalars.append((prefix, value))


def render_mapping(out: Output, title: str | None, data: Any) -> None:
    """Any JSON-like result as tables: scalars in one key/value table, each list of objects in its
    own table (the same data as the JSON, times shown as local time + epoch ms)."""
    data = to_jsonable(data)
    scalars: list[tuple[str, Any]] = []
    tables: list[tuple[str, list]] = []
    if isinstance(data, list) and all(isinstance(v, Mapping) for v in data):
        tables.append((title or "", data))
    else:
        _flatten("", data if isinstance(data, Mapping) else {"value": data}, scalars, tables)
    if scalars:
        out.print(kv_table(title, scalars))
    for name, rows in tables:
        cols: list[str] = []
        for r in rows:
            for k in r:
                if k not in cols:
                    cols.append(k)
        t = Table(title=name or None)
        for c in cols:
            t.add_column(escape(c), overflow="fold",
                         min_width=TIME_MIN_WIDTH if c.endswith("timestamp") else None)
        for r in rows:
            t.add_row(*(Text(_cell(c, r.get(c))) for c in cols))
        out.print(t)
