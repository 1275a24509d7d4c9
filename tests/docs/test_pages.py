"""Every code block of README.md and docs/ runs as written (tests/docs/docrun.py has the convention):
one test per page, its blocks in order in a fresh directory, servers started by the page included."""
from __future__ import annotations

import re

import pytest

from tests.docs import docrun

ROOT = docrun.ROOT
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: a page whose runnable blocks start Spark (marked ``spark``, as tests/spark is)
SPARK = re.compile(r"get_spark\(|SparkSession|rmqstore spark |pyspark")


def _param(path):
    rel = path.relative_to(ROOT).as_posix()
    text = path.read_text(encoding="utf-8")
    try:
        blocks = docrun.parse(text, rel)
    except docrun.DocsError:  # the page's test reports it
        return pytest.param(path, id=rel)
    spark = any(b.kind and b.directive != "skip" and SPARK.search(b.code) for b in blocks)
    # a Spark page starts a JVM: minutes on a loaded 2-core machine, so more than the suite's 600 s per test
    return pytest.param(path, id=rel, marks=[pytest.mark.spark, pytest.mark.timeout(1200)] if spark else [])


@pytest.mark.parametrize("path", [_param(p) for p in PAGES])
def test_every_block_of_the_page_runs(path, tmp_path):
    docrun.run_page(path, tmp_path)


def test_the_pages_follow_the_convention_and_most_blocks_run():
    """Every page parses (no untagged block, no unknown directive), and skips stay rare."""
    blocks = [b for p in PAGES for b in docrun.parse(p.read_text(encoding="utf-8"), p.name)]
    runnable = [b for b in blocks if b.kind]
    skipped = [b for b in runnable if b.directive == "skip"]
    assert len(runnable) >= 40
    assert len(skipped) <= len(runnable) // 8, [b.where() for b in skipped]
