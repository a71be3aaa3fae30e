"""awa_tui: the live terminal console; reads only through awa_ops."""
