"""Bar charts as geometry for SVG drawn on the server: columns over time, bars by name.

Pure functions from (label, value) pairs to rectangles and axis labels in a fixed coordinate
space; the template draws them (`_chart.html`), escaped like every other value, and the stylesheet
colours them (the CSP allows no inline style). No script and no library: a chart is part of the page.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

WIDTH = 720.0
COLUMN_HEIGHT = 220.0
LEFT = 64.0  # room for the value axis' labels
BOTTOM = 30.0  # room for the labels under the columns
TOP = 10.0
ROW = 22.0  # one horizontal bar and its gap
NAME_ROOM = 210.0  # the names left of horizontal bars
NAME_CHARS = 30


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar: its box, what it stands for, and its value as text (the tooltip and the label)."""

    x: float
    y: float
    width: float
    height: float
    label: str
    value: str


@dataclass(frozen=True, slots=True)
class Tick:
    """A label on an axis at a position."""

    at: float
    text: str


@dataclass(frozen=True, slots=True)
class Chart:
    """A whole chart: its size, bars and axis labels (`ticks` on the value axis, `names` on the other)."""

    title: str
    width: float
    height: float
    bars: tuple[Bar, ...]
    ticks: tuple[Tick, ...]
    names: tuple[Tick, ...]
    horizontal: bool
    axis: float  # where the bars start: right of the value labels, or of the names


def compact(value: float) -> str:
    """A count as a short label: 950, 12.5k, 3.1M."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.3g}" if value != int(value) else str(int(value))


def money(value: float) -> str:
    """An estimated cost as a label: 0.0042, 1.37, 250."""
    return f"{value:.4f}" if abs(value) < 1 else f"{value:,.2f}"


def nice_top(value: float) -> float:
    """The axis' top: the smallest of 1, 2, 2.5 or 5 times a power of ten at or above `value`."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= value)


def columns(title: str, points: Sequence[tuple[str, float]], shown: Callable[[float], str]) -> Chart:
    """Vertical columns in the order given (a column per day, the empty ones too), value axis left."""
    top = nice_top(max((value for _, value in points), default=0.0))
    plot_width, plot_height = WIDTH - LEFT, COLUMN_HEIGHT - TOP - BOTTOM
    slot = plot_width / max(len(points), 1)
    drawn, names = [], []
    # At most ~12 labels under the columns; every column keeps its tooltip.
    every = max(1, math.ceil(len(points) / 12))
    for index, (label, value) in enumerate(points):
        height = plot_height * max(value, 0.0) / top
        x = LEFT + index * slot
        drawn.append(Bar(x + slot * 0.1, TOP + plot_height - height, slot * 0.8, height, label, shown(value)))
        if index % every == 0:
            names.append(Tick(x + slot / 2, label))
    ticks = tuple(Tick(TOP + plot_height * (1 - share), shown(top * share)) for share in (0.0, 0.5, 1.0))
    return Chart(title, WIDTH, COLUMN_HEIGHT, tuple(drawn), ticks, tuple(names), horizontal=False, axis=LEFT)


def bars(title: str, points: Sequence[tuple[str, float]], shown: Callable[[float], str]) -> Chart:
    """Horizontal bars, one per name, in the order given (largest first reads best)."""
    top = nice_top(max((value for _, value in points), default=0.0))
    room = WIDTH - NAME_ROOM - 80.0  # the value's text goes right of the longest bar
    drawn, names = [], []
    for index, (label, value) in enumerate(points):
        y = TOP + index * ROW
        drawn.append(Bar(NAME_ROOM, y, room * max(value, 0.0) / top, ROW * 0.7, label, shown(value)))
        short = label if len(label) <= NAME_CHARS else label[: NAME_CHARS - 1] + "…"
        names.append(Tick(y + ROW * 0.5, short))
    height = TOP * 2 + ROW * max(len(points), 1)
    return Chart(title, WIDTH, height, tuple(drawn), (), tuple(names), horizontal=True, axis=NAME_ROOM)
