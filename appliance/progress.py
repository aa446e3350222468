"""Live progress on stderr: a table of nodes (id, sub-question, status) under the current phase.

Silent when stderr is not a terminal, so batch logs and pipes stay clean.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager

from .pipeline.state import Progress

STATUS_STYLE = {"pending": "dim", "in progress": "yellow", "done": "green", "failed": "red"}


class LiveTable:
    """Feeds a rich Live display from the pipeline's progress callbacks."""

    def __init__(self, question: str):
        from rich.console import Console

        self.console = Console(stderr=True)
        self.question = question
        self.phase = "starting"
        self.nodes: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()
        self._live = None

    def _render(self):
        from rich.table import Table

        table = Table(title=f"{self.question[:90]}  [dim]phase: {self.phase}[/dim]", expand=False)
        table.add_column("id", style="bold")
        table.add_column("sub-question", overflow="ellipsis", max_width=80)
        table.add_column("status")
        for node_id, (question, status) in self.nodes.items():
            style = STATUS_STYLE.get(status, "")
            table.add_row(node_id, question, f"[{style}]{status}[/{style}]" if style else status)
        return table

    def on_node(self, node_id: str, question: str, status: str) -> None:
        with self._lock:
            self.nodes[node_id] = (question, status)
            if self._live:
                self._live.update(self._render())

    def on_phase(self, phase: str) -> None:
        with self._lock:
            self.phase = phase
            if self._live:
                self._live.update(self._render())

    @contextmanager
    def running(self):
        from rich.live import Live

        with Live(self._render(), console=self.console, refresh_per_second=4, transient=False) as live:
            self._live = live
            try:
                yield Progress(on_node=self.on_node, on_phase=self.on_phase)
            finally:
                self._live = None


@contextmanager
def live_progress(question: str, enabled: bool | None = None):
    """A Progress for the pipeline: a live table when stderr is a terminal, else nothing."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield Progress()
        return
    with LiveTable(question).running() as progress:
        yield progress
