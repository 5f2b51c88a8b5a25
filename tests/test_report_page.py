"""The report as a reader takes it in: the terminal prints labels as they are (brackets included), the method is
described from the runs, the answer comes first, and sections that would say nothing are absent."""

from __future__ import annotations

import pandas as pd
import pytest
from rich.console import Console
from test_report import build_frames

from fwbench_aggregator.analyse.comparison import comparison_rows
from fwbench_aggregator.present import terminal

BRACKETED = "tensorflow [device H100]"


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    return comparison_rows(*build_frames())


def recorded(monkeypatch, width: int = 250) -> Console:
    console = Console(record=True, width=width)
    monkeypatch.setattr(terminal, "out_console", console)
    return console


@pytest.mark.parametrize("width", [250, 80])
def test_the_terminal_prints_a_label_with_square_brackets_whole(rows, monkeypatch, width):
    labelled = rows.replace({"runner": {"tensorflow": BRACKETED}})
    console = recorded(monkeypatch, width)
    terminal.print_series(labelled, console=console)
    one = labelled[(labelled["model"] == "resnet18") & (labelled["mode"] == "train") & (labelled["batch_size"] == 2)]
    terminal.print_compare(one[one["device"] == "gpu:0"], None, "store", pd.DataFrame(), [])
    text = console.export_text()
    assert "[device" in text and "H100]" in text
    assert f"({BRACKETED} vs torch)" not in text  # two runners: the verdict names no pair
    assert "profile): torch faster by" in text
