"""Small widgets and text helpers shared by the console's screens."""

from awa_tui.widgets.chrome import Banner, FilterBar, Notice, StatusLine, TextLine
from awa_tui.widgets.format import duration, relative, spark, stamp

__all__ = ["Banner", "FilterBar", "Notice", "StatusLine", "TextLine", "duration", "relative",
           "spark", "stamp"]
