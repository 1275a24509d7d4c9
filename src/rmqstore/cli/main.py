"""``rmqstore``: the offline toolbox for RocketMQ stores."""
from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table


@click.group()
def cli() -> None:
    """Offline toolbox for RocketMQ message stores (rmqstore's own and copies of a broker's)."""


@cli.command()
@click.option("--dir", "store_dir", default="data/store", show_default=True, help="Store directory (recreated).")
@click.option("--messages", default=100_000, show_default=True, help="How many messages to write.")
def demo(store_dir: str, messages: int) -> None:
    """Write a realistic workload into a fresh store (WRITES), then pull, query by key, id and time."""
    from ..demo import run_demo

    con = Console()
    rep = run_demo(store_dir, messages)
    t = Table(title=f"rmqstore demo: {rep.messages:,} messages, {rep.bytes_written / 1e6:.1f} MB in {rep.store_dir}")
    t.add_column("step")
    t.add_column("count", justify="right")
    t.add_column("seconds", justify="right")
    t.add_column("per second", justify="right")
    for what, n, s in rep.steps:
        t.add_row(what, f"{n:,}", f"{s:.3f}", f"{n / s:,.0f}" if s > 0 else "-")
    con.print(t)
    for what, ok in rep.checks:
        con.print(("[green]ok  [/]" if ok else "[red]FAIL[/] ") + what)
    if not rep.ok:
        raise SystemExit(1)


def main() -> None:
    cli()
