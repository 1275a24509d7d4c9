"""The docs site builds with ``mkdocs build --strict`` (no broken link, no page left out of the nav),
its generated parts say what the code says, and the user docs speak of the product only."""
from __future__ import annotations

import html
import re
import subprocess

import click
import pytest

from rmqstore.cli.errors import EXIT_CODE_DOCS
from rmqstore.cli.main import cli
from tests.docs import docrun

ROOT = docrun.ROOT
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    mkdocs = docrun.venv_bin() / "mkdocs"
    assert mkdocs.exists(), "mkdocs is not installed: ./scripts/setup installs the `docs` extra"
    r = subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", str(out)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env={**docrun.page_env(out), "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def text_of(site, page: str) -> str:
    """The visible text of a built page (tags removed, entities decoded)."""
    raw = (site / page / "index.html").read_text(encoding="utf-8")
    raw = raw[raw.index("<article"):raw.index("</article>")]
    return html.unescape(re.sub(r"<[^>]+>", " ", raw))


def commands(group: click.Group = cli, prefix: str = ""):
    for name, cmd in sorted(group.commands.items()):
        yield f"{prefix}{name}", cmd
        if isinstance(cmd, click.Group):
            yield from commands(cmd, f"{prefix}{name} ")


def test_the_exit_code_page_is_the_code_table(site):
    raw = (site / "exit-codes" / "index.html").read_text(encoding="utf-8")
    rows = re.findall(r"<tr>\s*<td[^>]*>(\d+)</td>\s*<td[^>]*>(.*?)</td>", raw, flags=re.S)
    got = {int(code): html.unescape(re.sub(r"<[^>]+>", "", meaning)).strip() for code, meaning in rows}
    assert got == {int(code): meaning for code, meaning, _ in EXIT_CODE_DOCS}


def test_the_cli_options_page_has_every_command_and_option(site):
    text = text_of(site, "cli-options")
    for path, cmd in commands():
        start = text.index(f"rmqstore {path} [OPTIONS]")
        nxt = text.find("Usage:", start + 1)
        section = text[start: nxt if nxt > 0 else len(text)]
        for param in cmd.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("-"):
                    assert opt in section, f"{opt} of `rmqstore {path}` is not on the generated page"


def test_the_api_page_documents_the_public_objects(site):
    raw = (site / "api" / "index.html").read_text(encoding="utf-8")
    for ident in ("rmqstore.MessageStore", "rmqstore.MessageStore.open", "rmqstore.MessageStore.get_message",
                  "rmqstore.MessageStore.query_message", "rmqstore.MessageStore.consumer", "rmqstore.MessageStoreConfig",
                  "rmqstore.Message", "rmqstore.MessageRecord", "rmqstore.consumer.Consumer.poll",
                  "rmqstore.broker.Broker", "rmqstore.spark.jobs.rebuild", "rmqstore.errors.StoreLockedError"):
        assert f'id="{ident}"' in raw, ident


def test_every_page_is_in_the_nav_and_linked_pages_exist(site):
    """--strict fails on pages left out of the nav (validation.omitted_files: warn) and on links to
    missing pages; here: the nav names no page twice and every page was built."""
    nav = re.findall(r"^\s*#?\s*-\s[^:]+:\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.M)
    built = [p for p in nav if (ROOT / "docs" / p).exists()]
    assert len(built) == len(set(built))
    for page in built:
        name = page[:-3]
        assert (site / ("" if name == "index" else name) / "index.html").exists(), page


HISTORY = [
    (r"\bissue \d+", "an issue number"),
    (r"\bthis session\b|\bsession of (?:the )?\d", "a work session"),
    (r"\b\d\d:\d\d UTC\b", "a dated run"),
    (r"\bcommit `?[0-9a-f]{7,40}\b|\([0-9a-f]{7,12}\)", "a commit hash"),
    (r"\bin (?:this|the) run\b|\bruns? before\b|\bthe day before\b", "a run-to-run note"),
]


@pytest.mark.parametrize("path", USER_DOCS, ids=[p.relative_to(ROOT).as_posix() for p in USER_DOCS])
def test_user_docs_speak_of_the_product_only(path):
    text = path.read_text(encoding="utf-8")
    for pattern, what in HISTORY:
        m = re.search(pattern, text, flags=re.I)
        assert m is None, f"{path.name}: {what}: {text[max(0, m.start() - 60): m.end() + 60]!r}"


def test_the_readme_is_a_landing_page():
    """Under 200 lines; the two commands first; four quickstarts; the suite's time; links into the docs
    that exist."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 200
    first = docrun.parse(text, "README.md")[0]
    assert [ln.split()[0] for ln in first.code.splitlines()] == ["./scripts/demo", "./scripts/test"]
    assert len(re.findall(r"^### \d\. ", text, flags=re.M)) == 4
    assert re.search(r"The suite takes about \d+\s+minutes on 2 cores", text)
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert len(set(links)) >= 10 and all((ROOT / link).exists() for link in links), links
