"""Runs the code blocks of a Markdown page, the way the docs promise they run.

The convention (every page of ``docs/`` and ``README.md``):

* fenced ```` ```python ````, ```` ```sh ```` and ```` ```bash ```` blocks run, the blocks of one page in
  order, in one fresh temporary directory, with the repository's ``.venv/bin`` first on ``PATH``; the
  python blocks of a page share one interpreter (one namespace), each sh block is its own
  ``bash -e -o pipefail`` process;
* ```` ```text ````, ```` ```console ````, ```` ```json ````, ```` ```properties ```` and ```` ```ini ````
  blocks are shown, not run; a block with another language, or none, is an error;
* ``<!-- run: background -->`` on the line before a sh block starts it in the background (its own
  process group); the runner waits until every ``HOST:PORT`` the block names accepts connections and
  kills the group when the page ends. The ports named by background blocks are replaced, on the
  whole page, by free ones (``127.0.0.1:9876`` everywhere on the page becomes ``127.0.0.1:<free>``),
  so that pages run beside other servers and each other;
* ``<!-- run: skip (reason) -->`` before a block leaves it out (a reason is required).

The temporary directory holds a ``.clients`` link to the checkout's real RocketMQ clients (made by
``scripts/setup``), so that a page can run ``.clients/remoting-py/bin/python`` as a reader of a
checkout would; ``HOME`` is another fresh directory (the clients write their logs under it).

A failing block raises :class:`BlockFailed` naming the page and line, with the block's output.
"""
from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.kit import free_port

ROOT = Path(__file__).resolve().parents[2]
RUN = {"python": "python", "sh": "sh", "bash": "sh"}
SHOWN = {"text", "console", "json", "properties", "ini"}
BLOCK_TIMEOUT_S = 300.0
LISTEN_TIMEOUT_S = 15.0

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*run:\s*(?P<what>[a-z-]+)\s*(?:\((?P<reason>.*)\))?\s*-->\s*$")
_ADDRESS = re.compile(r"\b(?P<host>127\.0\.0\.1|localhost|0\.0\.0\.0):(?P<port>\d{1,5})\b")

#: the interpreter of the python blocks: reads requests (page, line, code) as JSON lines from one
#: pipe, runs each in one namespace and answers on another; output goes to the page's log file
_DRIVER = r"""
import json, os, sys, traceback
requests, answers = os.fdopen(int(sys.argv[1]), "r"), os.fdopen(int(sys.argv[2]), "w")
namespace = {"__name__": "__main__"}
for line in requests:
    req = json.loads(line)
    try:
        exec(compile("\n" * (req["line"] - 1) + req["code"], req["page"], "exec"), namespace)
        answer = {"ok": True}
    except BaseException:
        answer = {"ok": False, "error": traceback.format_exc()}
    sys.stdout.flush(); sys.stderr.flush()
    answers.write(json.dumps(answer) + "\n"); answers.flush()
"""


class DocsError(Exception):
    """The page breaks the convention (an unknown language, a directive without what it needs)."""


class BlockFailed(AssertionError):
    """A block of the page failed: the message names the page and line and holds the output."""


@dataclass
class Block:
    page: str
    line: int           # the line of the block's first code line, 1-based
    lang: str           # the info string's first word ("" when none)
    code: str
    directive: str | None = None   # "background", "skip" or None
    reason: str | None = None
    seconds: float = 0.0            # how long it ran (set by run_page)

    @property
    def kind(self) -> str | None:
        """``python``, ``sh``, or None for a block that is shown only."""
        return RUN.get(self.lang)

    def where(self) -> str:
        return f"{self.page}:{self.line}"


def parse(text: str, page: str) -> list[Block]:
    """Every fenced block of ``text`` with the directive before it; :class:`DocsError` for a block
    or directive the convention does not allow."""
    lines = text.split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group("indent"), m.group("fence"), m.group("info").strip()
        start = i + 1
        j = start
        while j < len(lines) and not re.match(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", lines[j]):
            j += 1
        if j == len(lines):
            raise DocsError(f"{page}:{i + 1}: a code block that is never closed")
        body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[start:j]]
        lang = info.split()[0].lower() if info else ""
        block = Block(page, start + 1, lang, "\n".join(body) + "\n")
        _attach_directive(block, lines, i)
        _check(block)
        blocks.append(block)
        i = j + 1
    return blocks


def _attach_directive(block: Block, lines: list[str], fence_index: int) -> None:
    k = fence_index - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    if k < 0:
        return
    d = _DIRECTIVE.match(lines[k])
    if d:
        block.directive, block.reason = d.group("what"), (d.group("reason") or "").strip() or None
    elif "<!--" in lines[k] and "run:" in lines[k]:
        raise DocsError(f"{block.page}:{k + 1}: a run directive the runner cannot read: {lines[k].strip()!r}")


def _check(block: Block) -> None:
    if not block.lang:
        raise DocsError(f"{block.where()}: a code block without a language: say what it is "
                        f"({', '.join(sorted(RUN))} run; {', '.join(sorted(SHOWN))} are shown)")
    if block.lang not in RUN and block.lang not in SHOWN:
        raise DocsError(f"{block.where()}: code block language {block.lang!r} is neither run "
                        f"({', '.join(sorted(RUN))}) nor shown ({', '.join(sorted(SHOWN))})")
    if block.directive not in (None, "background", "skip"):
        raise DocsError(f"{block.where()}: unknown run directive {block.directive!r} (background, skip)")
    if block.directive == "skip" and not block.reason:
        raise DocsError(f"{block.where()}: `<!-- run: skip (reason) -->` needs its reason")
    if block.directive and block.kind is None:
        raise DocsError(f"{block.where()}: a run directive before a ```{block.lang} block, which is not run")
    if block.directive == "background":
        if block.kind != "sh":
            raise DocsError(f"{block.where()}: only a sh block can run in the background")
        if not addresses(block.code):
            raise DocsError(f"{block.where()}: a background block must name the HOST:PORT it listens on")


def addresses(code: str) -> list[tuple[str, int]]:
    """The loopback ``HOST:PORT`` addresses named in ``code`` (port 0 left out: nothing to wait for)."""
    out = []
    for m in _ADDRESS.finditer(code):
        port = int(m.group("port"))
        if port and (m.group("host"), port) not in out:
            out.append((m.group("host"), port))
    return out


def remap_ports(blocks: list[Block]) -> dict[int, int]:
    """Every port a background block listens on gets a free port, replaced in every block of the page."""
    ports = {p for b in blocks if b.directive == "background" for _, p in addresses(b.code)}
    mapping = {p: free_port() for p in sorted(ports)}
    if mapping:
        def sub(m: re.Match) -> str:
            port = int(m.group("port"))
            return f"{m.group('host')}:{mapping.get(port, port)}"
        for b in blocks:
            b.code = _ADDRESS.sub(sub, b.code)
    return mapping


@dataclass
class PageRun:
    """One page's run: its directory, environment, python interpreter and background servers."""

    page: str
    workdir: Path
    env: dict[str, str]
    log: Path
    python: subprocess.Popen | None = None
    requests: object = None
    answers: object = None
    background: list[tuple[Block, subprocess.Popen, Path]] = field(default_factory=list)
    ran: list[Block] = field(default_factory=list)

    # -- python blocks ------------------------------------------------------------------------
    def run_python(self, block: Block) -> None:
        if self.python is None:
            self._start_python()
        before = self.log.stat().st_size
        self.requests.write(json.dumps({"page": block.page, "line": block.line, "code": block.code}) + "\n")
        self.requests.flush()
        ready, _, _ = select.select([self.answers], [], [], BLOCK_TIMEOUT_S)
        line = self.answers.readline() if ready else ""
        if not line:
            self._stop_python()
            why = "did not finish in %.0f s" % BLOCK_TIMEOUT_S if not ready else "ended its interpreter"
            self.fail(block, why, self._log_since(before))
        answer = json.loads(line)
        if not answer["ok"]:
            self.fail(block, "raised", self._log_since(before) + answer["error"])

    def _start_python(self) -> None:
        req_r, req_w = os.pipe()
        ans_r, ans_w = os.pipe()
        with open(self.log, "ab") as out:
            self.python = subprocess.Popen(
                [str(venv_bin() / "python"), "-c", _DRIVER, str(req_r), str(ans_w)], pass_fds=(req_r, ans_w),
                cwd=self.workdir, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        os.close(req_r)
        os.close(ans_w)
        self.requests, self.answers = os.fdopen(req_w, "w"), os.fdopen(ans_r, "r")

    def _stop_python(self) -> None:
        if self.python is None:
            return
        for f in (self.requests, self.answers):
            try:
                f.close()
            except OSError:
                pass
        _end_group(self.python, grace_s=10.0, exit_s=30.0)  # at EOF it ends by itself (atexit hooks, Spark)
        self.python = None

    # -- sh blocks ----------------------------------------------------------------------------
    def run_sh(self, block: Block) -> None:
        if block.directive == "background":
            self._start_background(block)
            return
        proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", block.code], cwd=self.workdir, env=self.env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _end_group(proc, grace_s=2.0)
            out, _ = proc.communicate()
            self.fail(block, "did not finish in %.0f s (a server? mark it `<!-- run: background -->`)"
                      % BLOCK_TIMEOUT_S, out.decode(errors="replace"))
        if proc.returncode:
            self.fail(block, f"exited {proc.returncode}", out.decode(errors="replace"))

    def _start_background(self, block: Block) -> None:
        log = self.log.with_name(f"background-{block.line}.log")
        with open(log, "wb") as out:
            proc = subprocess.Popen(["bash", "-c", block.code], cwd=self.workdir, env=self.env,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.background.append((block, proc, log))
        deadline = time.monotonic() + LISTEN_TIMEOUT_S
        for host, port in addresses(block.code):
            while not _accepts(host, port):
                if proc.poll() is not None:
                    self.fail(block, f"ended (exit {proc.returncode}) before {host}:{port} accepted connections",
                              log.read_text(errors="replace"))
                if time.monotonic() > deadline:
                    self.fail(block, f"{host}:{port} did not accept connections within {LISTEN_TIMEOUT_S:.0f} s",
                              log.read_text(errors="replace"))
                time.sleep(0.05)

    # -- the page -----------------------------------------------------------------------------
    def fail(self, block: Block, why: str, output: str) -> None:
        tail = "\n".join(output.rstrip().split("\n")[-80:])
        servers = "".join(f"\n--- background block at {b.where()} (its output) ---\n"
                          + "\n".join(log.read_text(errors="replace").rstrip().split("\n")[-30:])
                          for b, _, log in self.background if b is not block)
        raise BlockFailed(f"{block.where()}: the ```{block.lang} block {why}\n--- the block ---\n{block.code}"
                          f"--- its output ---\n{tail}{servers}")

    def _log_since(self, offset: int) -> str:
        with open(self.log, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def close(self) -> None:
        self._stop_python()
        for _, proc, _ in reversed(self.background):
            _end_group(proc, grace_s=10.0)
        self.background.clear()


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1" if host == "0.0.0.0" else host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _end_group(proc: subprocess.Popen, grace_s: float, exit_s: float = 0.0) -> None:
    """Waits ``exit_s`` for the process to end by itself, then SIGTERM to its group, then SIGKILL
    after ``grace_s``."""
    if exit_s:
        try:
            proc.wait(timeout=exit_s)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever the block left in its group
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def venv_bin() -> Path:
    """The repository's ``.venv/bin``, else the running interpreter's directory."""
    bin_dir = ROOT / ".venv" / "bin"
    return bin_dir if (bin_dir / "python").exists() else Path(sys.executable).parent


def page_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RMQSTORE_", "PYTEST_", "SPARK_", "PYSPARK_"))}
    env.update(PATH=f"{venv_bin()}{os.pathsep}{env.get('PATH', '')}", HOME=str(home), PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    return env


def run_page(path: Path, workdir: Path | None = None, *, name: str | None = None) -> list[Block]:
    """Runs every runnable block of the page at ``path`` in order; returns the blocks that ran.
    Raises :class:`DocsError` for a page that breaks the convention, :class:`BlockFailed` for a
    block that fails."""
    name = name or (path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name)
    blocks = parse(path.read_text(encoding="utf-8"), name)
    remap_ports(blocks)
    owned = None
    if workdir is None:
        owned = tempfile.TemporaryDirectory(prefix="rmqstore-docs-")
        workdir = Path(owned.name)
    try:
        return _run_blocks(blocks, name, workdir)
    finally:
        if owned is not None:
            owned.cleanup()


def _run_blocks(blocks: list[Block], name: str, workdir: Path) -> list[Block]:
    page_dir, home = workdir / "page", workdir / "home"
    page_dir.mkdir(parents=True)
    home.mkdir()
    if (ROOT / ".clients").exists():
        (page_dir / ".clients").symlink_to(ROOT / ".clients")
    run = PageRun(name, page_dir, page_env(home), workdir / "python.log")
    run.log.touch()
    try:
        for block in blocks:
            if block.kind is None or block.directive == "skip":
                continue
            t0 = time.monotonic()
            (run.run_python if block.kind == "python" else run.run_sh)(block)
            block.seconds = time.monotonic() - t0
            run.ran.append(block)
    finally:
        run.close()
    return run.ran
