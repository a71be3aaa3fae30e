"""The `awa-tui` Textual app: a live console for a bastion host.

One database session (``awa_ops.OpsSession``, ``application_name`` awa-tui)
serves every screen; each refresh reads only what the visible screen shows,
in one short read-only transaction.  Lost connections, an unmigrated schema
and slow queries become a banner, never a crash; the console keeps retrying
at the refresh rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import click
import psycopg
from psycopg import errors as pg_errors
from rich.markup import escape
from textual import events
from textual._files import generate_datetime_filename
from textual.app import App
from textual.binding import Binding
from textual.message_pump import MessagePump
from textual.timer import Timer
from textual.worker import WorkType

from awa import config, db
from awa.cli.options import OneLineCommand
from awa.job import AwaError, DatabaseError, SchemaNotMigrated
from awa_ops.console import ConsoleActions, ConsoleReader, JobFilter
from awa_ops.replication import CACHE_KEY as REPLICATION_CACHE_KEY
from awa_ops.replication import ReplicationState, replication_state
from awa_ops.session import OpsSession
from awa_tui.screens.base import MUTATING_ACTIONS, ConsoleScreen
from awa_tui.screens.detail import JobDetailScreen
from awa_tui.screens.diagnostics import DiagnosticsScreen
from awa_tui.screens.dlq import DlqScreen
from awa_tui.screens.host import Action, ConsoleHost, Preview
from awa_tui.screens.jobs import JobsScreen
from awa_tui.screens.modals import ConfirmScreen, HelpScreen, PromptScreen
from awa_tui.screens.overview import OverviewScreen
from awa_tui.screens.running import RunningScreen

REFRESH_STEPS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
# The longest a typed key waits for what the key before it started (a screen to mount, a
# prompt to open) before it is read anyway: a widget removed meanwhile never answers.
KEY_WAIT_S = 1.0
BATCH_HELP = """

Start one from the Jobs screen: filter it, then b (set a priority or move to a queue);
cancel one with x on the Jobs screen and its id (or the first characters shown here).
The workers' maintenance leader runs them in chunks; what changed stays changed."""

GLOBAL_HELP = """
[b]Everywhere[/b]
  1 2 3 4 5   Overview, Running, Jobs, DLQ, Diagnostics
  ?           this help          esc   back / close
  :           open a job by id   /     filter (else the Jobs filter)
  + / -       refresh faster / slower
  f           freeze: stop refreshing (and ticking) to read the screen
  q           quit

Actions (cancel, retry, pause, DLQ retry/purge/move) go through the same admin
functions as the `awa` CLI, ask before they change anything, and are refused
by the database itself when the console runs with --read-only.
"""
READ_ONLY = "not available: the console is read-only (--read-only)"
READ_ONLY_STANDBY = ("not available: the console is read-only (a hot standby; point it at the "
                     "primary to act)")


def _ids(ids: list[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:10])
    return shown + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")


def describe_database(url: str) -> str:
    """``dbname@host`` for the status line; never the password."""
    try:
        parts = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return db.redact(url)
    return f"{parts.get('dbname', '?')}@{parts.get('host', 'localhost')}"


class AwaConsole(App[None]):
    CSS_PATH = "awa_tui.tcss"
    TITLE = "awa-tui"
    MODES = {"overview": OverviewScreen, "running": RunningScreen, "jobs": JobsScreen,
             "dlq": DlqScreen, "diagnostics": DiagnosticsScreen}
    BINDINGS = [
        Binding("1", "show('overview')", "Overview"),
        Binding("2", "show('running')", "Running"),
        Binding("3", "show('jobs')", "Jobs"),
        Binding("4", "show('dlq')", "DLQ"),
        Binding("5", "show('diagnostics')", "Diagnostics"),
        Binding("question_mark", "help", "Help"),
        Binding("colon", "jump", "Job id", show=False),
        # Reached only from a screen without a filter of its own (theirs come first).
        Binding("slash", "filter_jobs", "Filter", show=False),
        Binding("plus", "faster", "Faster", show=False),
        Binding("minus", "slower", "Slower", show=False),
        Binding("f", "freeze", "Freeze"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, database_url: str, *, refresh_s: float = config.TUI_REFRESH_SECONDS,
                 read_only: bool = False, min_age_s: float = 0.0,
                 stale_after_s: float | None = None,
                 clock: Callable[[], datetime] | None = None, label: str | None = None,
                 live: bool = True, exit_after_s: float | None = None) -> None:
        super().__init__()
        self.exit_after_s = exit_after_s
        self.database_url = database_url
        self.refresh_s = refresh_s
        self.read_only = read_only
        self.min_age_s = min_age_s
        self.stale_after_s = stale_after_s  # None: each runtime's own, as it publishes it
        self.clock = clock
        self.label = label or describe_database(database_url)
        self.live = live
        self.session: OpsSession | None = None
        # Primary or hot standby (and the standby's lag), read at connect and each refresh.
        self.replication: ReplicationState | None = None
        self.actions: ConsoleActions | None = None
        self.reader = ConsoleReader(None, clock=clock, stale_after_s=stale_after_s)  # type: ignore[arg-type]
        self.problem: str | None = None
        self.notice = ""
        self.frozen = False
        self.db_lock: asyncio.Lock | None = None
        self.anchor: datetime | None = None
        self.anchor_mono = 0.0
        self.findings: list[Any] | None = None
        self.findings_mono: float | None = None
        self.refresh_timer: Timer | None = None
        self.refreshes = 0
        # Keys typed and not read yet, and the key being read (None: ready for the next).
        self.typed: deque[events.Key] = deque()
        self.key_busy: object | None = None

    # -- lifecycle -------------------------------------------------------------
    def on_mount(self) -> None:
        self.db_lock = asyncio.Lock()
        self.switch_mode("overview")
        self._hold_keys(self)  # until the first screen is up
        if self.live:
            self.refresh_timer = self.set_interval(self.refresh_s, self.scheduled_refresh)
            self.set_interval(1.0, self.tick)
        if self.exit_after_s is not None:  # e.g. the demo's --duration
            self.set_timer(self.exit_after_s, self.exit)

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        """Screenshots (Ctrl+P → Screenshot) go to the current directory, not ~/Downloads,
        which a server or a bastion host rarely has; the notice says where."""
        directory = path or os.getcwd()
        filename = filename or generate_datetime_filename(self.title, ".svg", time_format)
        key = super().deliver_screenshot(filename, directory, time_format)
        self.say(f"screenshot saved to {os.path.join(directory, filename)}")
        return key
    async def on_unmount(self) -> None:
        await self._disconnect()

    def tick(self) -> None:
        screen = self.screen
        if not self.frozen and isinstance(screen, ConsoleScreen) and screen.composed():
            screen.tick()
            if self.problem is not None:
                screen.sync_chrome()  # the age of the data, while reads fail

    def display_now(self) -> datetime:
        """The database's clock as of the last refresh, advanced by local time."""
        if self.clock is not None:
            return self.clock()
        if self.anchor is None:
            return datetime.now(UTC)
        return self.anchor + timedelta(seconds=time.monotonic() - self.anchor_mono)

    # -- refresh -----------------------------------------------------------------
    def scheduled_refresh(self) -> None:
        if self.frozen or (self.db_lock is not None and self.db_lock.locked()):
            return
        self.request_refresh()

    def request_refresh(self) -> None:
        if self.db_lock is not None:
            # The function, not a coroutine: one never started at exit is not left unawaited.
            # The cast names the result type, which mypy cannot pick from WorkType's union.
            self.run_worker(cast("WorkType[None]", self.refresh_now), group="refresh")

    async def refresh_now(self) -> None:
        """Read what the visible screen shows and show it (or the problem)."""
        screen = self.screen
        if not isinstance(screen, ConsoleScreen) or self.db_lock is None:
            return
        async with self.db_lock:
            ok, data = await self._read(screen.fetch)
        if ok:
            # The database's clock at this read (a job that does not exist has no row to
            # carry it: the best estimate of it then).
            now = getattr(data, "now", None) or self.display_now()
            self.anchor, self.anchor_mono = now, time.monotonic()
        if ok and screen.composed():
            screen.show(data)
            screen.refit()
            self.refreshes += 1
        if screen.composed():
            screen.sync_chrome()

    async def _read(self, fetch: Callable[[ConsoleReader], Awaitable[Any]]) -> tuple[bool, Any]:
        try:
            if self.session is None:
                await self._connect()
            result = await fetch(self.reader)
            if self.replication is not None and self.replication.standby and self.session:
                self.replication = await replication_state(self.session, fresh=True)
        except SchemaNotMigrated as exc:
            self.problem = f"{db.one_line(exc)} — checking again every {self._every()}"
            await self._disconnect()
            return False, None
        except DatabaseError as exc:
            self.problem = f"{db.one_line(exc)} — retrying every {self._every()}"
            return False, None
        except psycopg.Error as exc:
            if self._connection_lost():
                self.problem = (f"lost the database connection ({db.one_line(exc)}) — "
                                f"reconnecting every {self._every()}")
                await self._disconnect()
            elif isinstance(exc, pg_errors.QueryCanceled):
                self.problem = (f"a query ran past the {config.OPS_STATEMENT_TIMEOUT_MS} ms "
                                f"statement timeout and was cancelled: {db.one_line(exc)}")
            else:
                self.problem = f"refresh failed: {db.one_line(exc)}"
            return False, None
        except Exception as exc:  # a bug in one read is a banner, never an exit (issue 13)
            self.problem = f"refresh failed: {type(exc).__name__}: {db.one_line(exc)}"
            return False, None
        self.problem = None
        return True, result

    def _connection_lost(self) -> bool:
        return self.session is None or self.session.conn.broken or self.session.conn.closed

    async def _connect(self) -> None:
        session = await OpsSession.open(self.database_url, application_name=config.APP_NAME_TUI,
                                        read_only=self.read_only)
        try:
            self.replication = await replication_state(session)
            if self.replication.standby and not self.read_only:
                # A standby refuses every write: the console is read-only on its own.
                await session.close()
                self.read_only = True
                session = await OpsSession.open(self.database_url,
                                                application_name=config.APP_NAME_TUI,
                                                read_only=True)
                session.cache[REPLICATION_CACHE_KEY] = self.replication
        except BaseException:
            await session.close()
            raise
        self.reader.session = session
        try:
            await self.reader.check_schema()
        except BaseException:
            await session.close()
            raise
        self.session = session
        self.actions = ConsoleActions(session)

    async def _disconnect(self) -> None:
        session, self.session, self.actions = self.session, None, None
        if session is not None:
            await session.close()

    async def refresh_diagnostics_if_due(self, reader: ConsoleReader,
                                         force: bool = False) -> list[Any]:
        """``diagnose all`` at most every TUI_DIAGNOSE_SECONDS: it is heavier than a refresh."""
        due = (self.findings is None or force or self.findings_mono is None
               or time.monotonic() - self.findings_mono >= config.TUI_DIAGNOSE_SECONDS)
        if due:
            self.findings = await reader.diagnostics(self.min_age_s)
            self.findings_mono = time.monotonic()
        return self.findings or []

    @property
    def diagnostic_status(self) -> str | None:
        if not self.findings:
            return None
        worst = max(r.severity for r in self.findings)
        label: str = worst.label.upper()
        return label

    # -- status ------------------------------------------------------------------
    def _every(self) -> str:
        return f"{self.refresh_s:g}s"

    def status_text(self, title: str) -> str:
        # What must survive an 80-column terminal comes first: the modes, then the data's
        # age; the database label and the cadence last (they are cut first).
        parts = [f"[b]awa-tui[/b] {title}"]
        if self.read_only:
            parts.append("[b reverse] READ-ONLY [/]")
        if self.frozen:
            parts.append("[b reverse] FROZEN [/]")
        parts += self.updated()
        if self.replication is not None and self.replication.standby:
            lag = self.replication.replay_lag_s
            parts.append("[b reverse] STANDBY [/] replay lag "
                         + ("unknown" if lag is None else f"{lag:.1f}s"))
        parts += [self.label, f"every {self._every()}"]
        return " │ ".join(parts)

    def updated(self) -> list[str]:
        """When the last read succeeded (the database's clock), and, once a read has
        failed since, how old what is shown is."""
        if self.anchor is None:
            return ["no successful read yet"] if self.problem is not None else []
        text = "updated " + self.anchor.astimezone(UTC).strftime("%H:%M:%S UTC")
        if self.problem is not None:
            age = max((self.display_now() - self.anchor).total_seconds(), 0.0)
            text += f", {age:.0f}s old"
        return [text]

    def sync_screen(self) -> None:
        if isinstance(self.screen, ConsoleScreen) and self.screen.composed():
            self.screen.sync_chrome()

    def say(self, text: str) -> None:
        self.notice = text
        self.sync_screen()

    # -- keys ------------------------------------------------------------------------
    async def on_event(self, event: events.Event) -> None:
        """Keys are read one at a time, in the order typed, by the screen showing when each
        is read: a key waits until what the key before it started is done (a screen
        switched to and mounted, a filter or a prompt open and focused, a character typed
        into it).  Textual alone hands each key to whatever has focus when it arrives, so
        ``3/queue`` typed quickly gave the ``/`` to the old screen and the ``q`` quit."""
        if isinstance(event, events.Key) and not event.is_forwarded:
            self.app_focus = True
            self.typed.append(event)
            await self._next_key()
            return
        await super().on_event(event)

    async def _next_key(self) -> None:
        while self.typed and self.key_busy is None:
            event = self.typed.popleft()
            # Textual's own order: priority bindings; then the focused widget, when it
            # takes the key as input (a character into the filter); else the bindings from
            # the focused widget up to the app.  (Textual's private dispatch, called here
            # so that the key is read now, not after it bubbles back from a widget.)
            taker: MessagePump = self
            if not await self._check_bindings(event.key, priority=True):
                focused = self.focused
                if focused is not None and focused.check_consume_key(event.key,
                                                                     event.character):
                    focused._forward_event(event)
                    taker = focused
                else:
                    await self._check_bindings(event.key)
            self._hold_keys(taker)

    def _hold_keys(self, taker: MessagePump) -> None:
        """Read no key until what the last one started is done (see ``_settle``)."""
        token = self.key_busy = object()
        self.run_worker(self._settle(token, taker), group="keys", exit_on_error=False)

    async def _settle(self, token: object, taker: MessagePump) -> None:
        """Each of these handles its messages in order, so once each has handled one
        posted now, what the key started is done: the widget that took the key, the app
        (focus changes, a prompt's answer), the focused widget (a row selected), the screen
        (mounted, when new), and again for a screen the key opened."""
        try:
            await self._drained(taker)
            await self._drained(self)
            await self._drained(self.focused)
            seen: set[int] = set()
            while id(self.screen) not in seen and len(seen) < 3:
                seen.add(id(self.screen))
                await self._drained(self.screen)
                await self._drained(self)
        finally:  # the next key is read whatever happened (no screen: the app is exiting)
            self.call_later(self._key_read, token)

    @staticmethod
    async def _drained(pump: MessagePump | None) -> None:
        """Until ``pump`` has handled what was posted to it before now (at most KEY_WAIT_S:
        one removed meanwhile never does)."""
        if pump is None:
            return
        done = asyncio.Event()
        if pump.call_later(done.set):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), KEY_WAIT_S)

    async def _key_read(self, token: object) -> None:
        if self.key_busy is token:
            self.key_busy = None
            await self._next_key()

    # -- navigation ----------------------------------------------------------------
    def switch_mode(self, mode: str) -> Any:
        """A notice is about the screen it was said on: a new screen starts without it."""
        self.notice = ""
        return super().switch_mode(mode)

    def action_show(self, mode: str) -> None:
        """A number key: that screen's own view, closing a job or a detail opened over
        the screen showing (the footer names the screen; the screen must be it)."""
        while len(self.screen_stack) > 1 and not self.screen.is_modal:
            self.pop_screen()
        self.switch_mode(mode)

    def action_filter_jobs(self) -> None:
        """``/`` where the screen has no filter (Overview, Diagnostics, a job): the Jobs
        filter, so what is typed next goes into a filter, never to this screen's keys."""
        self.action_show("jobs")
        screen = self.screen
        if isinstance(screen, JobsScreen):
            # After the screen's mount (the first visit composes it).
            screen.call_later(screen.action_filter)
            self.say("filter jobs (this screen has no filter of its own)")

    def action_help(self) -> None:
        screen = self.screen
        if isinstance(screen, ConsoleScreen):
            self.push_screen(HelpScreen(f"{screen.TITLE}: keys",
                                        screen.HELP + self.unavailable(screen) + GLOBAL_HELP))

    def unavailable(self, screen: ConsoleScreen) -> str:
        """In --read-only mode, the screen's keys that would change something."""
        if not self.read_only:
            return ""
        keys = [f"  {self.get_key_display(b):<8} {b.description.lower()}"
                for _, b in screen._bindings if b.action in MUTATING_ACTIONS]
        if not keys:
            return ""
        return ("\n[b]Unavailable (read-only session)[/b]: these keys only say so\n"
                + "\n".join(keys) + "\n")

    def refused_read_only(self, description: str) -> bool:
        """True (and one line saying so) when the console is read-only: nothing is asked."""
        if self.read_only:
            standby = self.replication is not None and self.replication.standby
            self.say(f"{description}: {READ_ONLY_STANDBY if standby else READ_ONLY}")
        return self.read_only

    def action_jump(self) -> None:
        """``:`` then a job id: its detail, from whichever screen is showing."""
        def answered(text: str | None) -> None:
            if not text:
                return
            digits = text.strip().lstrip("#")
            if not digits.isdigit():
                self.say(f"{text!r} is not a job id: type digits, e.g. 4242")
                return
            self.open_job(int(digits))

        self.push_screen(PromptScreen("Open job id:"), answered)

    def open_job(self, job_id: int) -> None:
        self.push_screen(JobDetailScreen(job_id))

    def open_jobs(self, **filters: str) -> None:
        self.action_show("jobs")
        screen = self.screen
        if isinstance(screen, JobsScreen):
            screen.set_filter(JobFilter(**filters))
            self.request_refresh()

    def action_faster(self) -> None:
        self._set_refresh(max((s for s in REFRESH_STEPS if s < self.refresh_s),
                              default=REFRESH_STEPS[0]))

    def action_slower(self) -> None:
        self._set_refresh(min((s for s in REFRESH_STEPS if s > self.refresh_s),
                              default=REFRESH_STEPS[-1]))

    def _set_refresh(self, seconds: float) -> None:
        self.refresh_s = min(max(seconds, config.TUI_MIN_REFRESH_SECONDS),
                             config.TUI_MAX_REFRESH_SECONDS)
        if self.refresh_timer is not None:
            self.refresh_timer.stop()
            self.refresh_timer = self.set_interval(self.refresh_s, self.scheduled_refresh)
        self.say(f"refreshing every {self._every()}")

    def action_freeze(self) -> None:
        self.frozen = not self.frozen
        self.say("frozen: press f to resume" if self.frozen else "live again")
        if not self.frozen:
            self.request_refresh()

    # -- operator actions ------------------------------------------------------------
    def confirm_then(self, question: str, description: str, action: Action) -> None:
        if self.refused_read_only(description):
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.run_worker(self.perform(description, action), group="action")
            else:
                self.say(f"{description}: not done")

        self.push_screen(ConfirmScreen(question), answered)

    async def perform(self, description: str, action: Action) -> None:
        """Run one action under the session lock; its outcome becomes the notice line."""
        outcome = await self._guarded(description, action)
        if outcome is not None:
            self.notice = outcome
        self.sync_screen()
        await self.refresh_now()

    async def _guarded(self, description: str,
                       call: Callable[[ConsoleActions], Awaitable[Any]]) -> Any:
        """``call`` under the session lock; on a failure the notice says so (one line)
        and None comes back."""
        assert self.db_lock is not None
        async with self.db_lock:
            try:
                if self.session is None:
                    await self._connect()
                assert self.actions is not None
                return await call(self.actions)
            except pg_errors.ReadOnlySqlTransaction as exc:
                self.notice = f"{description} refused by the read-only session: {db.one_line(exc)}"
            except AwaError as exc:
                self.notice = f"{description} failed: {db.one_line(exc)}"
            except psycopg.Error as exc:
                if self._connection_lost():
                    self.notice = (f"{description} failed: lost the database connection "
                                   f"({db.one_line(exc)})")
                    await self._disconnect()
                else:  # e.g. lock_timeout behind a long transaction: nothing was changed
                    self.notice = f"{description} failed, nothing changed: {db.one_line(exc)}"
        return None

    def preview_then_confirm(self, description: str, preview: Preview) -> None:
        """Read what a filter-wide action would touch, ask with that in the question, then
        act on exactly what was previewed (``preview`` returns the question and the action,
        or a notice and None when there is nothing to do)."""
        if self.refused_read_only(description):
            return

        async def run() -> None:
            found = await self._guarded(f"{description} preview", preview)
            if found is None:
                self.sync_screen()
                return
            question, action = found
            if action is None:
                self.say(question)
            else:
                self.confirm_then(question, description, action)

        self.run_worker(run(), group="action")

    def show_batch_operations(self) -> None:
        """The newest batch operations and their progress, in a box (B again refreshes)."""
        async def run() -> None:
            lines = await self._guarded("batch operations", lambda a: a.batch_operations())
            if lines is None:
                self.sync_screen()
                return
            # Indented: kept as written (not reflowed); escaped: a filter is not markup.
            text = "\n".join(f"  {escape(line)}" for line in lines) or "no batch operations"
            self.push_screen(HelpScreen("Batch operations (newest first)", text + BATCH_HELP))

        self.run_worker(run(), group="action")

    def confirm_cancel(self, ids: list[int]) -> None:
        self.confirm_then(f"Cancel job(s) {_ids(ids)}? Running handlers are told to stop.",
                          "cancel", lambda a: a.cancel_jobs(ids))

    def confirm_retry(self, ids: list[int]) -> None:
        self.confirm_then(f"Retry job(s) {_ids(ids)} from scratch?", "retry",
                          lambda a: a.retry_jobs(ids))

    def confirm_dlq_retry(self, ids: list[int]) -> None:
        self.confirm_then(f"Retry DLQ job(s) {_ids(ids)}? They become available again.",
                          "DLQ retry", lambda a: a.dlq_retry(ids))

    def confirm_dlq_purge(self, ids: list[int]) -> None:
        self.confirm_then(f"Purge DLQ job(s) {_ids(ids)}? They are deleted for good.",
                          "DLQ purge", lambda a: a.dlq_purge(ids))

    def confirm_dlq_move(self, queue: str, reason: str) -> None:
        self.confirm_then(f"Move every failed job of queue {queue!r} into the DLQ "
                          f"with reason {reason!r}?", "DLQ move",
                          lambda a: a.dlq_move(queue, reason))


# Set by textual-serve (`awa serve`) for the console it runs per browser over pipes.
WEB_DRIVER_ENV = "TEXTUAL_DRIVER"
NOT_A_TERMINAL = ("standard output is not a terminal (piped or redirected): awa-tui draws a "
                  "live screen; for text use `awa queue stats` or `awa-ops diagnose all "
                  "--watch 5`")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_seconds(value: str, option: str) -> float:
    """``90``, ``90s``, ``5m``, ``1h`` -> seconds; a clear one-line error otherwise."""
    match = _DURATION.match(value)
    if not match:
        raise click.BadParameter(f"{value!r} is not a duration: write e.g. 30, 30s, 5m or 1h",
                                 param_hint=option)
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def _serves_its_screens(console: AwaConsole) -> ConsoleHost:
    """The console is what its screens ask for (mypy checks this assignment)."""
    return console


def run_app(database_url: str, *, refresh_s: float = config.TUI_REFRESH_SECONDS,
            read_only: bool = False, min_age_s: float = 0.0, exit_after_s: float | None = None,
            stale_after_s: float | None = None) -> None:
    """Run the console in this terminal (``awa serve`` runs this same function per browser)."""
    AwaConsole(database_url, refresh_s=refresh_s, read_only=read_only, min_age_s=min_age_s,
               stale_after_s=stale_after_s, exit_after_s=exit_after_s).run()


class TuiCommand(OneLineCommand):
    """`awa-tui`'s mistakes are one ``error:`` line; a database it cannot reach exits 3."""

    error_exit_code = 3


@click.command(cls=TuiCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="awa-py", prog_name="awa-tui")
@click.option("--database-url", default=None, metavar="URL",
              help="PostgreSQL URL (default: $DATABASE_URL, else the embedded server).")
@click.option("--refresh", "refresh", default=str(config.TUI_REFRESH_SECONDS), metavar="SECONDS",
              show_default=True, help="How often to re-read the visible screen.")
@click.option("--read-only", is_flag=True,
              help="Open a read-only database session: actions are refused by PostgreSQL.")
@click.option("--min-age", "min_age", default="0", metavar="SECONDS",
              help="Running screen: hide attempts younger than this (e.g. 30s, 5m).")
@click.option("--stale-after", "stale_after", metavar="SECONDS", default=None,
              help="Heartbeat age after which a running attempt shows as stale "
                   "[default: each runtime's own, as its snapshot publishes it, else "
                   f"{config.HEARTBEAT_STALENESS_MS / 1000:g}s].")
def main(database_url: str | None, refresh: str, read_only: bool, min_age: str,
         stale_after: str | None) -> None:
    """awa-tui: the live console for an awa database."""
    refresh_s = parse_seconds(refresh, "--refresh")
    if not config.TUI_MIN_REFRESH_SECONDS <= refresh_s <= config.TUI_MAX_REFRESH_SECONDS:
        raise click.BadParameter(
            f"must be between {config.TUI_MIN_REFRESH_SECONDS:g} and "
            f"{config.TUI_MAX_REFRESH_SECONDS:g} seconds", param_hint="--refresh")
    min_age_s = parse_seconds(min_age, "--min-age")
    stale_after_s = None if stale_after is None else parse_seconds(stale_after, "--stale-after")
    if not sys.stdout.isatty() and WEB_DRIVER_ENV not in os.environ:
        # Piped or redirected, the live screen would be control codes in a file.
        raise click.UsageError(NOT_A_TERMINAL)
    try:
        url = db.resolve_database_url(database_url)
    except AwaError as exc:
        click.echo(f"awa-tui: {db.one_line(exc)}", err=True)
        sys.exit(3)
    run_app(url, refresh_s=refresh_s, read_only=read_only, min_age_s=min_age_s,
            stale_after_s=stale_after_s)


if __name__ == "__main__":  # pragma: no cover
    main()
