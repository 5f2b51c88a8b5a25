"""A Progress that keeps what a use case reported, for a test to read."""

from __future__ import annotations

from fwbench_aggregator.base.progress import Progress


class RecordingProgress(Progress):
    def __init__(self) -> None:
        self.notes: list[tuple[str, str]] = []  # (level, text)
        self.tasks: list[str] = []

    def note(self, text: str, level: str = "info") -> None:
        self.notes.append((level, text))

    def add_task(self, description: str, total: int | None = None) -> int:
        self.tasks.append(description)
        return len(self.tasks)

    def warnings(self) -> list[str]:
        return [text for level, text in self.notes if level == "warning"]
