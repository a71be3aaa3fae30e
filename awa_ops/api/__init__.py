"""The REST API served by ``awa serve``: routes, shapes and read side (docs/api.md)."""

from awa_ops.api.app import build_app, with_auth
from awa_ops.api.state import ApiSettings, ApiState, open_state

__all__ = ["ApiSettings", "ApiState", "build_app", "open_state", "with_auth"]
