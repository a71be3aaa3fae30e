"""This distribution's version, in a module of its own: the runtime reports it, and importing
it from ``awa`` itself would make every runtime module depend on the whole public API."""

__version__ = "0.4.0"
