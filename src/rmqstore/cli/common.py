"""What every command shares: ``--store``/``--config``/``--json``/``--debug``, opening the store,
parameter types (times, ``NAME=VALUE``), and the group class that turns exceptions into one line
and an exit code (:mod:`rmqstore.cli.errors`)."""
from __future__ import annotations

import datetime as dt
import functools
import logging
import os
import re
import sys
import traceback
from typing import Any, Callable

import click

from .errors import CliError, ExitCode, UsageProblem, classify

DEBUG_KEY = "rmqstore.debug"
#: set when the command line asks for --json: errors are then printed as JSON
JSON_KEY = "rmqstore.json"
DEFAULT_STORE = os.path.join("data", "store")
STORE_ENV = "RMQSTORE_STORE"


# ---------------------------------------------------------------------------------------------
# Parameter types
# ---------------------------------------------------------------------------------------------
def parse_time_ms(text: str) -> int:
    """Epoch milliseconds from ``1700000000037``, ``now``, or an ISO time (``2023-11-14T22:13:20Z``,
    ``2023-11-14 23:13:20.037+01:00``; without an offset it is local time)."""
    s = text.strip()
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    if s.lower() == "now":
        return int(dt.datetime.now().timestamp() * 1000)
    iso = s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s
    try:
        t = dt.datetime.fromisoformat(iso)
    except ValueError:
        raise ValueError(f"{text!r} is neither epoch milliseconds nor an ISO time "
                         "(e.g. 1700000000037 or 2023-11-14T22:13:20Z)") from None
    if t.tzinfo is None:
        t = t.astimezone()  # local time
    return int(round(t.timestamp() * 1000))


class TimeParam(click.ParamType):
    """A time given as :func:`parse_time_ms` takes it (a subclass: its own ``parse``, and a ``hint``
    added to the error)."""

    name = "TIME"
    parse = staticmethod(parse_time_ms)
    hint = ""

    def convert(self, value: Any, param, ctx) -> int:
        if isinstance(value, int):
            return value
        try:
            return self.parse(str(value))
        except ValueError as e:
            self.fail(f"{e}{self.hint}", param, ctx)


class KeyValueParam(click.ParamType):
    name = "NAME=VALUE"

    def convert(self, value: Any, param, ctx) -> tuple[str, str]:
        if isinstance(value, tuple):
            return value
        name, sep, val = str(value).partition("=")
        if not sep or not name:
            self.fail(f"{value!r} is not NAME=VALUE", param, ctx)
        return name, val


TIME = TimeParam()
KEY_VALUE = KeyValueParam()


# ---------------------------------------------------------------------------------------------
# The per-invocation context handed to every store command
# ---------------------------------------------------------------------------------------------
class StoreCommand:
    """Resolved ``--store``/``--config``/``--json`` of one invocation; opens the store."""

    def __init__(self, store: str | None, config: str | None, json_mode: bool):
        self.config_path = config
        self._props: dict[str, str] | None = None
        if store is None:
            root = self.broker_properties().get("storePathRootDir")
            store = os.path.expanduser(root) if root else DEFAULT_STORE
        self.store_path = store
        #: the stores of a command that takes several (``rmqstore spark --store A --store B``)
        self.locations = [store]
        from .render import Output

        self.out = Output(json_mode)

    @property
    def json(self) -> bool:
        return self.out.json

    def broker_properties(self) -> dict[str, str]:
        if self._props is None:
            if self.config_path is None:
                self._props = {}
            else:
                from ..config import read_properties_file

                self._props = read_properties_file(self.config_path)
        return self._props

    def config(self):
        """MessageStoreConfig: the --config file (RocketMQ's broker defaults and policies), or
        without one the embedded preset (as ``MessageStore.open`` without a config); segment sizes
        are taken from the store's own files where they exist."""
        from ..config import MessageStoreConfig
        from ..layout import infer_config, resolve_config

        props = self.broker_properties()
        if not props:
            return resolve_config(self.store_path, None)
        base = MessageStoreConfig.from_properties(props)
        if os.path.isdir(self.store_path):
            return infer_config(self.store_path, base)
        return base

    def open_read(self, stand_in_derived: bool = True):
        """The store opened read-only: no lock, nothing on disk changes (``stand_in_derived``: see
        ``MessageStore.open``)."""
        from ..message_store import MessageStore

        return MessageStore.open(self.store_path, self.config(), read_only=True, stand_in_derived=stand_in_derived)

    def refuse_if_locked(self) -> None:
        """Raise :class:`~rmqstore.errors.StoreLockedError` at once when a live process holds the
        store's lock (before a writing command reads its input or does any other work)."""
        from ..errors import StoreLockedError
        from ..message_store import lock_holder

        if os.path.isdir(self.store_path):
            pid = lock_holder(self.store_path)
            if pid is not None:
                who = f" (pid {pid})" if pid > 0 else ""
                raise StoreLockedError(f"another process{who} holds the store lock (a running broker or writer?)",
                                       path=self.store_path)

    def open_write(self, create: bool = False):
        """The store opened for writing (takes the lock, recovers). Refuses to turn a directory that
        is not a store into one unless ``create`` and the directory is missing or empty."""
        from ..errors import StoreNotFoundError
        from ..layout import is_store_dir
        from ..message_store import MessageStore

        path = self.store_path
        if not is_store_dir(path):
            if not create:
                what = "store directory does not exist" if not os.path.exists(path) else \
                    "not a message store (no commitlog/, consumequeue/ or checkpoint)"
                raise CliError(f"{what} (path={path})", code=ExitCode.STORE_NOT_FOUND,
                               hint="check --store, or pass --create to start a new store there")
            if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
                raise StoreNotFoundError("refusing to create a store in a non-empty directory that is not a store",
                                         path=path)
        return MessageStore.open(path, self.config(), read_only=False)


def _set_debug(ctx: click.Context, param, value: bool) -> bool:
    if value:
        ctx.meta[DEBUG_KEY] = True
    return value


def debug_option(f: Callable) -> Callable:
    return click.option("--debug", is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
                        envvar="RMQSTORE_DEBUG", help="Show the Python traceback when a command fails.")(f)


def json_option(f: Callable) -> Callable:
    return click.option("--json", "json_mode", is_flag=True,
                        help="Print JSON (the shapes are in the CLI reference) instead of tables.")(f)


def store_options(f: Callable) -> Callable:
    """Adds --store/--config/--json/--debug and passes a :class:`StoreCommand` as first argument."""

    @functools.wraps(f)
    def wrapper(*args, store: str | None, config: str | None, json_mode: bool, **kwargs):
        return f(StoreCommand(store, config, json_mode), *args, **kwargs)

    wrapper = debug_option(wrapper)
    wrapper = json_option(wrapper)
    wrapper = click.option("--config", "config", type=click.Path(dir_okay=False, exists=True), default=None,
                           metavar="BROKER_CONF",
                           help="broker.conf-style properties (RocketMQ names: mappedFileSizeCommitLog, "
                                "storePathRootDir, ...). Segment sizes are read from the store's files anyway.")(wrapper)
    wrapper = click.option("--store", "store", type=click.Path(file_okay=False), default=None, envvar=STORE_ENV,
                           metavar="DIR",
                           help=f"Store directory (holds commitlog/). Default: ${STORE_ENV}, else storePathRootDir "
                                f"from --config, else {DEFAULT_STORE}.")(wrapper)
    return wrapper


# ---------------------------------------------------------------------------------------------
# Errors -> one line + exit code
# ---------------------------------------------------------------------------------------------
class _EchoHandler(logging.Handler):
    """The store's own log lines (e.g. "abnormal recovery", "corrupt record skipped") on stderr as
    ``store warning: ...`` / ``store error: ...``, apart from the CLI's final ``Error:`` line."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            click.echo(f"store {record.levelname.lower()}: {record.getMessage()}", err=True)
        except Exception:  # noqa: BLE001 - logging must never break a command
            pass


_HANDLER = _EchoHandler(level=logging.WARNING)


def install_logging(ctx: click.Context) -> None:
    """Show the store's warnings while this invocation runs (removed again when it ends, so an
    in-process caller such as a test keeps its logging as it was)."""
    log = logging.getLogger("rmqstore")
    if _HANDLER in log.handlers:
        return
    level = log.level
    log.addHandler(_HANDLER)
    if level == logging.NOTSET or level > logging.WARNING:
        log.setLevel(logging.WARNING)

    def restore() -> None:
        log.removeHandler(_HANDLER)
        log.setLevel(level)

    ctx.call_on_close(restore)


def report_error(ctx: click.Context, exc: BaseException) -> int:
    code, message, hint = classify(exc)
    if ctx.meta.get(DEBUG_KEY):
        click.echo("".join(traceback.format_exception(exc)).rstrip(), err=True)
    emit_error(ctx, message, int(code), hint)
    return int(code)


def emit_error(ctx: click.Context, message: str, code: int, hint: str | None) -> None:
    """The error line on stderr: ``Error: MESSAGE -- HINT``, or with --json one JSON object
    ``{"error": MESSAGE, "exit": CODE, "hint": HINT}``."""
    if ctx.meta.get(JSON_KEY):
        import json

        click.echo(json.dumps({"error": message, "exit": code, "hint": hint}), err=True)
        return
    click.echo(f"Error: {message}" + (f" -- {hint}" if hint else ""), err=True)


def wants_json(args: list[str]) -> bool:
    """Whether a command line asks for --json (options end at ``--``)."""
    for a in args:
        if a == "--":
            return False
        if a == "--json":
            return True
    return False


class RmqGroup(click.Group):
    """A click group that reports failures of its commands as one line and an exit code. Names in
    ``hidden_aliases`` (mqadmin's command names, :mod:`.aliases`) run like commands but are not
    listed in ``--help``."""

    hidden_aliases: dict[str, click.Command] = {}

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, cmd_name) or self.hidden_aliases.get(cmd_name)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if wants_json(args):
            ctx.meta[JSON_KEY] = True
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.ClickException as e:
            if not ctx.meta.get(JSON_KEY):
                raise
            emit_error(ctx, e.format_message(), e.exit_code, None)
            ctx.exit(e.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(int(ExitCode.INTERRUPTED))
        except BrokenPipeError:
            # `rmqstore browse ... | head`: the reader went away; stop quietly.
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            except (OSError, ValueError, AttributeError):
                pass
            ctx.exit(int(ExitCode.OK))
        except Exception as exc:  # noqa: BLE001 - every failure becomes one line and an exit code
            ctx.exit(report_error(ctx, exc))


def usage_problem(message: str, hint: str | None = None) -> UsageProblem:
    return UsageProblem(message, hint=hint)
