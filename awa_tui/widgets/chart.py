"""A labelled line chart with a scale (plotext through textual-plotext), one line per queue."""

from __future__ import annotations

from collections.abc import Sequence

from textual_plotext import PlotextPlot

MAX_LINES = 5  # more lines than this are unreadable in a terminal chart


class QueueChart(PlotextPlot):
    """Per-queue values over the last minutes: x in minutes before now, y in ``unit``."""

    def __init__(self, title: str, unit: str, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.title = title
        self.unit = unit
        self.series: dict[str, list[tuple[float, float]]] = {}

    def show_series(self, series: dict[str, list[tuple[float, float]]], window_min: float) -> None:
        """``series``: queue -> [(minutes before now (<= 0), value)], busiest first."""
        self.series = dict(list(series.items())[:MAX_LINES])
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(self.title)
        plt.xlabel("minutes ago")
        plt.ylabel(self.unit)
        plt.xlim(-window_min, 0)
        top = max((v for points in self.series.values() for _, v in points), default=0.0)
        plt.ylim(0, nice_top(top))
        for queue, points in self.series.items():
            if points:
                plt.plot([x for x, _ in points], [y for _, y in points], label=queue,
                         marker="braille")
        self.refresh()


def nice_top(value: float, steps: Sequence[float] = (1, 2, 2.5, 5, 10)) -> float:
    """The y scale's top: the smallest 1/2/2.5/5 x 10^n at or above ``value`` (1 for 0)."""
    if value <= 0:
        return 1.0
    magnitude = 1.0
    while magnitude * 10 < value:
        magnitude *= 10
    while magnitude > value:
        magnitude /= 10
    for step in steps:
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude
