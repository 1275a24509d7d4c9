"""Stores on other filesystems: S3 and S3-compatible services (``s3://``, ``s3a://``) and HDFS
(``hdfs://``, where libhdfs is present), through pyarrow's filesystems.

A location is kept as its URI; executors open it themselves (the driver only lists files). A
commitlog byte range is read with ranged reads into an anonymous mapping of the segment's size, so
the codecs see positions relative to the segment as with a local mmap and only the pages read are
ever allocated: a task holds about its split (plus one record's worth past its end).

S3 settings: the options ``s3.endpoint`` (``http://host:port`` or ``https://...``), ``s3.accessKey``,
``s3.secretKey``, ``s3.region``, else the standard AWS environment variables (``AWS_ENDPOINT_URL``,
``AWS_ENDPOINT_URL_S3``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_REGION``/``AWS_DEFAULT_REGION``) as seen by the driver (they travel with the read to the
executors), else pyarrow's own credential chain.
"""
from __future__ import annotations

import fnmatch
import mmap
import os
import posixpath
from urllib.parse import urlparse

from ..errors import ConfigError, StoreNotFoundError

REMOTE_SCHEMES = ("s3", "s3a", "hdfs")
#: the option names (lower case) that configure S3
S3_OPTIONS = {"s3.endpoint": "endpoint", "s3.accesskey": "access_key", "s3.secretkey": "secret_key",
              "s3.region": "region", "s3.sessiontoken": "session_token"}


#: the largest ranged read of a remote file, in bytes (and what a remote index file is scanned by)
READ_CHUNK = 16 << 20

_SETTINGS: dict[str, dict[str, str]] = {}


def register(location: str, settings: dict[str, str] | None) -> None:
    """The S3 settings to open ``location`` with, in this process (the driver, or a task)."""
    _SETTINGS[str(location)] = dict(settings or {})


def settings_for(location: str) -> dict[str, str]:
    return _SETTINGS.get(str(location), {})


def is_remote(location: str) -> bool:
    return urlparse(str(location)).scheme in REMOTE_SCHEMES


def s3_settings(given: dict[str, str] | None = None) -> dict[str, str]:
    """The S3 settings of a read: the options given, completed from the environment (on the driver)."""
    out = {k: v for k, v in (given or {}).items() if v}
    env = os.environ
    defaults = {"endpoint": env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"),
                "access_key": env.get("AWS_ACCESS_KEY_ID"), "secret_key": env.get("AWS_SECRET_ACCESS_KEY"),
                "session_token": env.get("AWS_SESSION_TOKEN"),
                "region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")}
    for k, v in defaults.items():
        if v and k not in out:
            out[k] = v
    return out


def filesystem(location: str, settings: dict[str, str] | None = None):
    """``(pyarrow filesystem, path inside it)`` for a remote ``location``."""
    import pyarrow.fs as pafs

    u = urlparse(str(location))
    if u.scheme in ("s3", "s3a"):
        s = settings or {}
        kw: dict = {}
        endpoint = s.get("endpoint")
        if endpoint:
            e = urlparse(endpoint if "://" in endpoint else "https://" + endpoint)
            kw["endpoint_override"] = e.netloc
            kw["scheme"] = e.scheme or "https"
        if s.get("access_key") and s.get("secret_key"):
            kw["access_key"], kw["secret_key"] = s["access_key"], s["secret_key"]
            if s.get("session_token"):
                kw["session_token"] = s["session_token"]
        kw["region"] = s.get("region") or "us-east-1"
        return pafs.S3FileSystem(**kw), (u.netloc + u.path).rstrip("/")
    if u.scheme == "hdfs":
        try:
            fs, path = pafs.FileSystem.from_uri(str(location))
        except (OSError, ImportError) as e:
            raise ConfigError(f"option path: {location!r}: HDFS is not reachable here ({e}); it needs libhdfs "
                              "(Hadoop's native client) and a running name node") from None
        return fs, path.rstrip("/")
    raise ConfigError(f"option path: {location!r}: scheme {u.scheme!r} is not supported")


def join(location: str, *parts: str) -> str:
    return location.rstrip("/") + "/" + "/".join(parts)


def list_files(location: str, settings: dict[str, str] | None, sub: str) -> list[tuple[str, int]]:
    """``(name, size)`` of the files in ``location/sub`` (empty when it does not exist)."""
    import pyarrow.fs as pafs

    fs, path = filesystem(location, settings)
    try:
        infos = fs.get_file_info(pafs.FileSelector(f"{path}/{sub}", allow_not_found=True))
    except OSError as e:
        raise StoreNotFoundError(f"cannot list {sub}: {e}", path=location) from None
    return sorted((posixpath.basename(i.path), i.size) for i in infos if i.type == pafs.FileType.File)


def list_tree(location: str, settings: dict[str, str] | None, sub: str) -> list[tuple[str, int]]:
    """``(path relative to location/sub, size)`` of every file under ``location/sub``, in one
    recursive listing (empty when it does not exist)."""
    import pyarrow.fs as pafs

    fs, path = filesystem(location, settings)
    base = f"{path}/{sub}"
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True, recursive=True))
    except OSError as e:
        raise StoreNotFoundError(f"cannot list {sub}: {e}", path=location) from None
    return sorted((posixpath.relpath(i.path, base), i.size) for i in infos if i.type == pafs.FileType.File)


def expand_remote(location: str, settings: dict[str, str] | None) -> list[str]:
    """Store locations matching ``location`` (a glob in its last parts is expanded by listing)."""
    import pyarrow.fs as pafs

    u = urlparse(location)
    if not set("*?[") & set(u.path):
        return [location.rstrip("/")]
    fs, path = filesystem(location, settings)
    parts = path.split("/")
    first = next(i for i, p in enumerate(parts) if set("*?[") & set(p))
    base = "/".join(parts[:first])
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    depth = len(parts)
    found = sorted(i.path for i in infos if i.type == pafs.FileType.Directory
                   and len(i.path.split("/")) == depth and fnmatch.fnmatchcase(i.path, path))
    prefix = f"{u.scheme}://"
    host = u.netloc
    out = []
    for p in found:
        rest = p[len(host):] if u.scheme in ("s3", "s3a") and p.startswith(host) else p
        out.append(prefix + host + rest if u.scheme in ("s3", "s3a") else f"{prefix}{host}{p}")
    if not out:
        raise StoreNotFoundError(f"no store directory matches the glob {location!r}", path=location)
    return out


def exists(location: str, settings: dict[str, str] | None, rel: str) -> bool:
    """Whether ``location/rel`` exists (a file or a directory; on S3 a prefix with objects)."""
    import pyarrow.fs as pafs

    fs, path = filesystem(location, settings)
    info = fs.get_file_info(f"{path}/{rel}")
    if info.type != pafs.FileType.NotFound:
        return True
    listed = fs.get_file_info(pafs.FileSelector(f"{path}/{rel}", allow_not_found=True))
    return bool(listed)


def upload(local_path: str, location: str, rel: str) -> int:
    """Copy the local file ``local_path`` to ``location/rel`` (streamed in 8 MiB pieces); its size."""
    fs, path = filesystem(location, settings_for(location))
    n = 0
    with open(local_path, "rb") as src, fs.open_output_stream(f"{path}/{rel}") as dst:
        while True:
            chunk = src.read(8 << 20)
            if not chunk:
                break
            dst.write(chunk)
            n += len(chunk)
    return n


def remote_mapping(location: str, rel_path: str, size: int, lo: int, hi: int):
    """A read-only :class:`~rmqstore.io.mapped_file.MappedFile` of ``size`` bytes over an anonymous
    mapping filled with the bytes ``[lo, hi)`` of the remote file ``location/rel_path`` (ranged reads
    of at most :data:`READ_CHUNK`; the rest reads as zeros, like the unwritten end of a segment, and
    takes no memory). Opened with the settings registered for ``location``."""
    from ..io.mapped_file import MappedFile

    fs, path = filesystem(location, settings_for(location))
    mm = mmap.mmap(-1, size)
    try:
        with fs.open_input_file(f"{path}/{rel_path}") as f:
            for pos, data in _ranged_reads(f, lo, min(hi, f.size(), size)):
                mm[pos:pos + len(data)] = data
    except BaseException:
        mm.close()
        raise
    return MappedFile.holding(f"{location.rstrip('/')}/{rel_path}", size, mm, "")


def _ranged_reads(f, pos: int, end: int):
    """``(position, bytes)`` of the ranged reads of at most :data:`READ_CHUNK` that cover ``[pos,
    end)`` of the open remote file ``f`` (stopping at its end)."""
    while pos < end:
        data = f.read_at(min(end - pos, READ_CHUNK), pos)
        if not data:
            return
        yield pos, data
        pos += len(data)


def _ranged(f, pos: int, n: int) -> bytes:
    """The bytes ``[pos, pos + n)`` of the open remote file ``f`` (fewer at its end)."""
    parts = [data for _, data in _ranged_reads(f, pos, pos + n)]
    return parts[0] if len(parts) == 1 else b"".join(parts)


def index_geometry(location: str, rel_path: str, size: int) -> tuple[int, int] | None:
    """``(slots, items)`` of the remote index file ``location/rel_path`` of ``size`` bytes from its
    contents, by the rule local files follow (:func:`~rmqstore.format.index_file.geometry_of`), or
    None when they do not tell (or the file is no longer ``size`` bytes). Ranged reads: the header,
    the file from its end backwards :data:`READ_CHUNK` bytes at a time to the last item written,
    then the slots and items written a chunk at a time; held meanwhile: a chunk (or the newest items
    checked, at most 1.3 MiB) and 4 bytes an item written."""
    from ..format.index_file import geometry_of

    fs, path = filesystem(location, settings_for(location))
    with fs.open_input_file(f"{path}/{rel_path}") as f:
        if f.size() != size:
            return None
        return geometry_of(lambda pos, n: _ranged(f, pos, n), size, READ_CHUNK)
