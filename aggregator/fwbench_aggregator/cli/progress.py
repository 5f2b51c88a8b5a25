"""Progress on the terminal: base.progress.Progress shown with rich, bars on stderr that vanish when done, and
notes printed above them as they happen."""

from __future__ import annotations

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichBars

from ..base.progress import Progress
from ..present.console import err_console

STYLES = {"info": "", "warning": "yellow", "error": "bold red"}


class TerminalProgress(Progress):
    def __init__(self) -> None:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        self.bars = RichBars(*columns, console=err_console, transient=True)

    def note(self, text: str, level: str = "info") -> None:
        style = STYLES.get(level, "")
        # Notes may repeat what the user typed or a runner said: printed as text, never read as console markup.
        err_console.print(f"[{style}]{escape(text)}[/]" if style else escape(text), highlight=False)

    def add_task(self, description: str, total: int | None = None) -> int:
        return self.bars.add_task(escape(description), total=total)

    def update(
        self, task: int, *, description: str | None = None, completed: int | None = None, total: int | None = None
    ) -> None:
        fields = {"completed": completed, "total": total}
        if description is not None:
            fields["description"] = escape(description)
        self.bars.update(task, **{k: v for k, v in fields.items() if v is not None})

    def advance(self, task: int) -> None:
        self.bars.advance(task)

    def remove_task(self, task: int) -> None:
        if task in self.bars.task_ids:
            self.bars.remove_task(task)

    def __enter__(self) -> TerminalProgress:
        self.bars.start()
        return self

    def __exit__(self, *exc) -> None:
        self.bars.stop()
