"""MkDocs hooks: the parts of pages generated from the code, so that they cannot drift from it.

``<!-- generated: exit-codes -->`` becomes the table of the ``rmqstore`` exit codes
(:data:`rmqstore.cli.errors.EXIT_CODE_DOCS`). The CLI options come from the click commands
through the mkdocs-click extension; the Python API from docstrings through mkdocstrings.
"""
from __future__ import annotations

MARKER = "<!-- generated: exit-codes -->"


def exit_code_table() -> str:
    from rmqstore.cli.errors import EXIT_CODE_DOCS

    rows = ["| code | meaning | what to do |", "|---:|---|---|"]
    for code, meaning, fix in EXIT_CODE_DOCS:
        rows.append(f"| {int(code)} | {meaning} | {fix} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, exit_code_table())
    return markdown
