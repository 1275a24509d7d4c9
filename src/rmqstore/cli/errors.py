"""Exit codes and error reporting of the ``rmqstore`` command, defined in one place.

Every failure ends the command with one line on stderr (what went wrong, where, how to fix it)
and a distinct exit status; ``--debug`` (or ``RMQSTORE_DEBUG=1``) adds the Python traceback.
The docs site generates its exit-code table from EXIT_CODE_DOCS (docs/hooks.py).
"""
from __future__ import annotations

import enum
import errno

from .. import errors as E


class ExitCode(enum.IntEnum):
    OK = 0
    INTERNAL = 1            # a bug or an unexpected failure
    USAGE = 2               # bad option, argument or input file (click uses 2 for usage errors)
    STORE_NOT_FOUND = 3     # StoreNotFoundError
    STORE_LOCKED = 4        # StoreLockedError
    CORRUPT = 5             # CorruptRecordError
    READ_ONLY = 6           # ReadOnlyStoreError
    CONFIG = 7              # ConfigError
    OFFSET = 8              # OffsetError
    IO = 9                  # StoreIOError and other OS errors
    UNKNOWN_TOPIC = 10      # topic (or queue) not in the store
    NOT_FOUND = 11          # the one message asked for is not in the store
    PROBLEMS_FOUND = 12     # verify left problems unfixed; demo checks failed
    PUT_FAILED = 13         # send/load: the store refused a message
    SPARK_UNAVAILABLE = 14  # pyspark or Java missing, or the Spark job module is not installed
    ADDRESS_IN_USE = 15     # serve: another process listens on the address
    INTERRUPTED = 130       # Ctrl-C


#: (exit code, what it means, how to fix) -- the docs site's exit-code table is generated from it (docs/hooks.py).
EXIT_CODE_DOCS: list[tuple[ExitCode, str, str]] = [
    (ExitCode.OK, "success", "-"),
    (ExitCode.INTERNAL, "unexpected error (a bug)", "rerun with --debug and report the traceback"),
    (ExitCode.USAGE, "bad usage or input (option, argument, time, msgId, JSONL line)", "see the command's --help"),
    (ExitCode.STORE_NOT_FOUND, "store directory missing or not a message store", "point --store at the directory holding commitlog/"),
    (ExitCode.STORE_LOCKED, "another process holds the store's lock", "stop the broker/writer, or use a read-only command"),
    (ExitCode.CORRUPT, "corrupt record or file", "run `rmqstore verify` to see the damage"),
    (ExitCode.READ_ONLY, "write refused: the store is read-only", "use a command that opens the store for writing"),
    (ExitCode.CONFIG, "bad configuration value (in the --config file; a missing file is a usage error)", "fix the named key in broker.conf"),
    (ExitCode.OFFSET, "offset outside the stored data", "check the range with `rmqstore stats`/`topic-status`"),
    (ExitCode.IO, "operating-system I/O error", "the message names the path and the cause (permissions, free space, ...)"),
    (ExitCode.UNKNOWN_TOPIC, "unknown topic or queue", "list topics with `rmqstore topic-status`"),
    (ExitCode.NOT_FOUND, "the message asked for is not in the store", "check the id/offset; it may have been cleaned"),
    (ExitCode.PROBLEMS_FOUND, "verify found problems it did not fix (or demo checks failed)", "run `rmqstore verify --fix`"),
    (ExitCode.PUT_FAILED, "the store refused a message (status not PUT_OK)", "read the status; e.g. shorten the message"),
    (ExitCode.SPARK_UNAVAILABLE, "Spark unavailable (pyspark, Java 17 or the job module missing)", "run ./scripts/setup"),
    (ExitCode.ADDRESS_IN_USE, "the listen address is in use (another broker or name server?)",
     "stop the other server, or give --listen another port"),
    (ExitCode.INTERRUPTED, "interrupted (Ctrl-C)", "-"),
]


class CliError(Exception):
    """A failure the CLI reports itself: message, exit code and a hint."""

    code: ExitCode = ExitCode.INTERNAL
    hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None, code: ExitCode | None = None):
        super().__init__(message)
        if hint is not None:
            self.hint = hint
        if code is not None:
            self.code = code


class UsageProblem(CliError):
    code = ExitCode.USAGE


class UnknownTopicError(CliError):
    code = ExitCode.UNKNOWN_TOPIC
    hint = "list the store's topics and queues with `rmqstore topic-status`"


class MessageNotFoundError(CliError):
    code = ExitCode.NOT_FOUND


class ProblemsFoundError(CliError):
    code = ExitCode.PROBLEMS_FOUND
    hint = "run `rmqstore verify --fix` (it writes) or `rmqstore recover`"


class PutFailedError(CliError):
    code = ExitCode.PUT_FAILED


class AddressInUseError(CliError):
    code = ExitCode.ADDRESS_IN_USE
    hint = "stop the other server, or give --listen another port"


class SparkUnavailableError(CliError):
    code = ExitCode.SPARK_UNAVAILABLE
    hint = "install Spark support and Java 17 with ./scripts/setup"


# Order matters: the first matching class wins.
_STORE_ERRORS: list[tuple[type[BaseException], ExitCode, str | None]] = [
    (E.StoreNotFoundError, ExitCode.STORE_NOT_FOUND,
     "point --store (or $RMQSTORE_STORE) at the directory that holds commitlog/ and consumequeue/"),
    (E.StoreLockedError, ExitCode.STORE_LOCKED,
     "stop the broker or the other writer first; read-only commands work on a locked store"),
    (E.CorruptRecordError, ExitCode.CORRUPT,
     "`rmqstore verify` lists the damage (`verify --fix` repairs consume queues and index; a damaged "
     "commitlog record can only come back from a copy); `browse` reads around damaged records"),
    (E.MessageIdError, ExitCode.USAGE,
     "an offsetMsgId is 32 hex digits (56 for IPv6 hosts); a producer's msgId (UNIQ_KEY) goes to query-unique-key"),
    (E.ReadOnlyStoreError, ExitCode.READ_ONLY, "use a command that opens the store for writing"),
    (E.ConfigError, ExitCode.CONFIG, "fix the named key in the --config file (RocketMQ broker.conf names)"),
    (E.OffsetError, ExitCode.OFFSET,
     "check the valid range with `rmqstore stats` or `rmqstore topic-status`"),
    (E.OutputExistsError, ExitCode.USAGE,
     "give a new output path (or an empty directory); nothing was written"),
    (E.StoreIOError, ExitCode.IO, None),
]

#: the hint of an operating-system error, by its errno (none for a cause the message says itself)
_OS_HINTS = {
    errno.EACCES: "check the permissions of the named path",
    errno.EPERM: "check the permissions of the named path",
    errno.EROFS: "the file system is read-only",
    errno.ENOSPC: "free space on the named path's file system",
    errno.EDQUOT: "free space (disk quota) on the named path's file system",
    errno.EMFILE: "raise the open-files limit (ulimit -n)",
    errno.ENFILE: "raise the open-files limit (ulimit -n)",
}


def _os_errno(exc: BaseException) -> int | None:
    """The errno of an OS error, or of the OS error a store error was raised from."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, OSError) and exc.errno is not None:
            return exc.errno
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def classify(exc: BaseException) -> tuple[ExitCode, str, str | None]:
    """(exit code, one-line message, hint) for an exception raised while a command ran."""
    if isinstance(exc, CliError):
        return exc.code, str(exc), exc.hint
    if _os_errno(exc) == errno.EADDRINUSE:
        return (ExitCode.ADDRESS_IN_USE, f"address in use: {exc}",
                "stop the other server, or give --listen another port")
    for typ, code, hint in _STORE_ERRORS:
        if isinstance(exc, typ):
            return code, str(exc), hint if hint is not None else _OS_HINTS.get(_os_errno(exc))
    if isinstance(exc, E.RmqStoreError):
        return ExitCode.INTERNAL, f"{type(exc).__name__}: {exc}", "rerun with --debug for the traceback"
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        return ExitCode.IO, f"{exc.strerror or exc}{where}", _OS_HINTS.get(exc.errno)
    return (ExitCode.INTERNAL, f"unexpected {type(exc).__name__}: {exc}",
            "rerun with --debug and report the traceback")
