"""MkDocs hooks: the parts of pages generated from the code, so that they cannot drift from it.

``<!-- generated: exit-codes -->`` becomes the table of the ``rmqstore`` exit codes
(:data:`rmqstore.cli.errors.EXIT_CODE_DOCS`), ``<!-- generated: store-config -->`` the table of the
store's settings (:class:`rmqstore.MessageStoreConfig`: RocketMQ's key, the Python field, the broker
default and the embedded preset's value). The CLI options come from the click commands
through the mkdocs-click extension; the Python API from docstrings through mkdocstrings.
"""
from __future__ import annotations

MARKER = "<!-- generated: exit-codes -->"
CONFIG_MARKER = "<!-- generated: store-config -->"


def exit_code_table() -> str:
    from rmqstore.cli.errors import EXIT_CODE_DOCS

    rows = ["| code | meaning | what to do |", "|---:|---|---|"]
    for code, meaning, fix in EXIT_CODE_DOCS:
        rows.append(f"| {int(code)} | {meaning} | {fix} |")
    return "\n".join(rows)


def store_config_table() -> str:
    from dataclasses import fields

    from rmqstore.config import MessageStoreConfig, camel_name

    broker, embedded = MessageStoreConfig(), MessageStoreConfig.embedded()
    rows = ["| broker.conf key | Python field | broker preset | embedded preset |", "|---|---|---|---|"]
    for f in fields(MessageStoreConfig):
        b, e = getattr(broker, f.name), getattr(embedded, f.name)
        rows.append(f"| `{camel_name(f.name)}` | `{f.name}` | `{b!r}` | {'' if e == b else f'`{e!r}`'} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, exit_code_table())
    if CONFIG_MARKER in markdown:
        markdown = markdown.replace(CONFIG_MARKER, store_config_table())
    return markdown
