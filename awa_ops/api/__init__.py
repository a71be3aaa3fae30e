"""The REST API served by ``awa serve``: routes, shapes and read side (docs/api.md)."""

from awa_ops.api.app import ApiSettings, ApiState, build_app, open_state, with_auth

__all__ = ["ApiSettings", "ApiState", "build_app", "open_state", "with_auth"]
