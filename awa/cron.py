"""Cron schedules: client.periodic and the cron admin functions (issue: maintenance)."""

from __future__ import annotations


class CronMixin:
    """Placeholder until its issue fills it in."""
