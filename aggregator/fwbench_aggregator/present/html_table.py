"""A table as HTML: its values escaped, figures right-aligned, and the columns the same in every row said once in its
caption, so that a table repeats only what tells its rows apart and fits the page."""

from __future__ import annotations

import html
from collections.abc import Iterable

import pandas as pd

from .display import NUMERIC_HEADERS

# Values that say nothing about a row: a column holding only these is dropped, not lifted into the caption.
_EMPTY = ("", "–", "nan", "None")


# A word longer than this (an option string, a hash, a path) may break anywhere, so that it cannot widen its table;
# shorter ones wrap only between words.
LONG_WORD = 24


def _long(text: str) -> str:
    return ' class="long"' if any(len(word) > LONG_WORD for word in text.split()) else ""


def lifted(shown: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """The columns whose value is the same in every row (of two or more), said once as 'model resnet18 · mode
    train', and the table without them: a table repeats only what tells its rows apart."""
    if len(shown) < 2:
        return "", shown
    same = [c for c in shown.columns if shown[c].astype(str).nunique() == 1]
    if len(same) == len(shown.columns):  # rows alike in every column: keep them as they are
        return "", shown
    first = shown.iloc[0]
    caption = " · ".join(f"{c} {first[c]}" for c in same if str(first[c]) not in _EMPTY)
    return caption, shown.drop(columns=same)


def table_html(shown: pd.DataFrame, failed: Iterable[bool] | None = None, lift: bool = False) -> str:
    """A table of displayed values; with `lift`, the columns the same in every row said once in its caption."""
    e = html.escape
    failed = list(failed) if failed is not None else [False] * len(shown)
    caption, shown = lifted(shown) if lift else ("", shown)
    head = "".join(f"<th>{e(str(c))}</th>" for c in shown.columns)
    body = []
    for is_failed, values in zip(failed, shown.itertuples(index=False)):
        cells = "".join(
            f'<td class="num">{e(str(v))}</td>' if c in NUMERIC_HEADERS else f"<td{_long(str(v))}>{e(str(v))}</td>"
            for c, v in zip(shown.columns, values)
        )
        body.append(f'<tr class="failed">{cells}</tr>' if is_failed else f"<tr>{cells}</tr>")
    # Above the table as a paragraph, not a <caption>: a caption is as narrow as its table.
    caption = f'<p class="caption">Every row: {e(caption)}</p>' if caption else ""
    return f"{caption}<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
