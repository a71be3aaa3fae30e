"""Dialogs: confirmation before anything destructive, a one-field prompt, and help."""

from __future__ import annotations

from typing import cast

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static


class ConfirmScreen(ModalScreen[bool]):
    """``y`` confirms, ``n`` or escape declines; nothing happens until then."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n", "answer(False)", "No"),
                Binding("escape", "answer(False)", "No")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.question, id="question")
            yield Label("[b]y[/b] yes   [b]n[/b] no", id="answers")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class PromptInput(Input):
    """Enter answers now, not after a Submitted message travels to the screen: a key
    typed right after it is read by the screen the answer opens."""

    async def action_submit(self) -> None:
        cast(PromptScreen, self.screen).answer(self.value)


class PromptScreen(ModalScreen[str | None]):
    """One line of input (e.g. a DLQ reason); escape cancels."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, question: str, default: str = "") -> None:
        super().__init__()
        self.question = question
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.question, id="question")
            yield PromptInput(value=self.default, id="answer")

    def answer(self, value: str) -> None:
        self.dismiss(value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


def reflow(text: str) -> str:
    """Join the lines of prose paragraphs so they wrap to the box (a narrow terminal
    otherwise breaks them twice); indented lines -- the key tables -- stay as written."""
    out: list[str] = []
    for line in text.split("\n"):
        prose = bool(line) and not line[0].isspace()
        if (prose and not line.startswith("[b]") and out and out[-1]
                and not out[-1][0].isspace()):
            out[-1] += " " + line
        else:
            out.append(line)
    return "\n".join(out)


class HelpScreen(ModalScreen[None]):
    """The keys of the screen it was opened from, plus the global ones."""

    BINDINGS = [Binding("escape", "close", "Close"), Binding("question_mark", "close", "Close"),
                Binding("q", "close", "Close")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text = title
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(f"[b]{self.title_text}[/b]  [dim](↑ ↓ pgup pgdn scroll, esc closes)[/]"
                         f"\n\n{reflow(self.text)}", id="help-text")

    def on_mount(self) -> None:
        self.query_one("#help").focus()  # the arrow and page keys scroll it

    def action_close(self) -> None:
        self.dismiss(None)
