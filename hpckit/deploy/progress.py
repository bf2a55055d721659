"""Show a running deploy: a live host x task table on a terminal, plain lines elsewhere; then a summary."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from hpckit.deploy.events import COUNTED, Tracker


def tally_table(tracker: Tracker, title: str, live: bool = False) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("host")
    if live:
        table.add_column("task")
    for name in COUNTED:
        table.add_column(name, justify="right")
    for host, tally in sorted(tracker.hosts.items()):
        counts = tally.as_dict()
        style = "red" if counts["failed"] or counts["unreachable"] else None
        row = [host, *([tally.task] if live else []), *(str(counts[k]) for k in COUNTED)]
        table.add_row(*row, style=style)
    return table


class Progress:
    """Consumes runner events; feed it to `run_playbook` as the event sink."""

    def __init__(self, tracker: Tracker, console: Console, enabled: bool = True, title: str = "deploying") -> None:
        self.tracker = tracker
        self.title = title
        self.console = console
        self.live: Live | None = None
        self.enabled = enabled

    def __enter__(self) -> Progress:
        if self.enabled and self.console.is_terminal:
            self.live = Live(self._render(), console=self.console, refresh_per_second=4, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def __call__(self, event: Mapping[str, Any]) -> None:
        before = len(self.tracker.failures)
        self.tracker.feed(event)
        if self.live is not None:
            self.live.update(self._render())
        elif self.enabled:
            self._plain(event)
        for failure in self.tracker.failures[before:]:
            if self.live is not None:
                self.live.console.print(f"[red]{failure}[/red]")

    def _plain(self, event: Mapping[str, Any]) -> None:
        if event.get("event") == "playbook_on_play_start":
            self.console.print(f"play: {self.tracker.current_play}", highlight=False)
        elif event.get("event") in ("runner_on_failed", "runner_on_unreachable") and self.tracker.failures:
            self.console.print(str(self.tracker.failures[-1]), highlight=False)

    def _render(self) -> Table:
        return tally_table(self.tracker, f"{self.title} - {self.tracker.current_play}", live=True)
