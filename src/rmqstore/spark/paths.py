"""Store locations as the data source and the jobs accept them: a directory, a ``file:`` URI (what
Spark's catalog stores for ``CREATE TABLE ... OPTIONS (path ...)``), a glob, or several of them
(``load([p1, p2])`` hands the source a JSON list in the ``paths`` option). Nothing here imports pyspark.
"""
from __future__ import annotations

import glob
import json
import os
from urllib.parse import unquote, urlparse

from ..errors import ConfigError, StoreNotFoundError

_GLOB_CHARS = set("*?[")


def local_path(location: str) -> str:
    """A local path from ``location`` (a path, or a ``file:`` URI); ConfigError for other schemes."""
    s = str(location).strip()
    if "://" in s or s.startswith("file:"):
        from .fs import REMOTE_SCHEMES

        u = urlparse(s)
        if u.scheme != "file":
            raise ConfigError(f"option path: {s!r}: the {u.scheme}:// scheme is not supported (local paths, "
                              f"file: URIs, {', '.join(x + '://' for x in REMOTE_SCHEMES)})")
        if u.netloc not in ("", "localhost"):
            raise ConfigError(f"option path: {s!r}: a file: URI names a host ({u.netloc}); use file:///path")
        return unquote(u.path)
    return s


def parse_paths(path: str | None, paths: str | None) -> list[str]:
    """The locations given: ``path`` (one), or ``paths`` (a JSON list, as Spark passes ``load([...])``)."""
    out: list[str] = []
    if paths:
        try:
            given = json.loads(paths)
        except ValueError:
            given = [p for p in str(paths).split(",")]
        if isinstance(given, str):
            given = [given]
        if not isinstance(given, list) or not all(isinstance(p, str) for p in given):
            raise ConfigError(f"option paths: expected a list of store directories, got {paths!r}")
        out += given
    if path:
        out.append(path)
    if not out:
        raise ConfigError("option path: no store directory given; use .load('/path/to/store')")
    return out


def expand(locations: list[str]) -> list[str]:
    """Local store directories: URIs made paths, globs expanded (sorted; a glob matching no
    directory is an error naming it), duplicates dropped, order kept."""
    stores: list[str] = []
    for loc in locations:
        p = local_path(loc)
        if _GLOB_CHARS & set(p):
            found = sorted(d for d in glob.glob(p) if os.path.isdir(d))
            if not found:
                raise StoreNotFoundError(f"no store directory matches the glob {loc!r}", path=p)
            matches = found
        else:
            matches = [p]
        for m in matches:
            norm = os.path.normpath(m)
            if norm not in stores:
                stores.append(norm)
    return stores
