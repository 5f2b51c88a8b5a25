"""What a long operation tells whoever shows it. Use cases and stages report through a Progress and never print:
the command line shows it with rich (cli.progress), the Slurm job in its log, a test not at all.

The base class does nothing, so that a caller that shows nothing passes Progress()."""

from __future__ import annotations


class Progress:
    """Tasks with a description and, where known, a total; and notes, lines worth showing as they happen."""

    def note(self, text: str, level: str = "info") -> None:
        """A line for the user now: level "info", "warning" or "error"."""

    def add_task(self, description: str, total: int | None = None) -> int:
        return 0

    def update(
        self, task: int, *, description: str | None = None, completed: int | None = None, total: int | None = None
    ) -> None:
        pass

    def advance(self, task: int) -> None:
        pass

    def remove_task(self, task: int) -> None:
        pass

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        pass
