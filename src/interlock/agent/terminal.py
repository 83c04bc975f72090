"""The terminal contract: each request is put on a terminal and the typed lines answer it.

A contract like the others (`interlock.agent.contracts`), with a user interface of its
own: prompts on a stream, lines read on a daemon thread so a prompt made moot by an inbox
answer never holds the process open. `interlock watch` drives it through `prompt`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
from typing import Any, ClassVar, TextIO

from ..broker import Broker
from ..errors import InvalidAnswer
from ..model import Answers, Ask, Request, Response

__all__ = ["TerminalContract"]

log = logging.getLogger("interlock")


class _Skip:
    """An optional ask left unanswered at the terminal."""


_SKIP = _Skip()


class TerminalContract:
    """Puts each request on a terminal and answers it with the typed lines (`via="terminal"`).

    `input` and `output` default to the process's stdin and stdout, read when a prompt is
    shown; pass other streams to drive it from a test or a pty. One prompt is on the
    terminal at a time. A confirm takes yes/no words; a choice takes an option's number,
    id or label (ignoring case), and any other text is passed through as the answer (the
    broker checks it; a bad answer is shown and asked again); a multi-choice takes a
    comma-separated list; a form takes a JSON object. Denying an approval asks for a
    reason, which reaches the agent verbatim. End of input gives the request up.

    Lines are read on a daemon thread, so a prompt that an inbox answer made moot never
    holds the process open. On a terminal, a line typed before the next prompt shows is
    dropped, as it was meant for the request answered elsewhere; from a pipe or a file,
    every line answers the next prompt in turn, and the end of input is reached once the
    last line has been taken.
    """

    name: ClassVar[str] = "terminal"

    def __init__(self, input: TextIO | None = None, output: TextIO | None = None, *, by: str | None = None) -> None:
        self._input = input
        self._output = output
        self.by = by
        self._lock = asyncio.Lock()
        self._reading: asyncio.Future[str] | None = None
        self._taken = asyncio.Event()  # set each time a prompt takes a line

    def __repr__(self) -> str:
        return "TerminalContract()"

    async def settle(self, broker: Broker, request: Request) -> Response:
        prompter = asyncio.ensure_future(self._converse(broker, request))
        try:
            return await broker.wait(request.id)
        finally:
            prompter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await prompter

    async def prompt(self, broker: Broker, request: Request) -> bool:
        """Put one request on the terminal and send the answer, without owning it: no wait,
        nothing withdrawn. True once answered here; False if it was settled first elsewhere.

        `interlock watch` uses it. End of input raises `EOFError` and changes nothing.
        """
        async with self._lock:
            if (await broker.get(request.id)).status.settled:
                return False
            self._show(request)
            while (answered := await self._answer_once(broker, request)) is None:
                pass
            return answered

    # -- the conversation ------------------------------------------------------------------

    async def _converse(self, broker: Broker, request: Request) -> None:
        try:
            async with self._lock:
                if (await broker.get(request.id)).status.settled:
                    return
                self._show(request)
                while await self._answer_once(broker, request) is None:
                    pass
        except EOFError:
            self._say("(end of input: the request is given up)")
            await broker.cancel(request.id, "the terminal reached the end of its input", by=self.by, via="terminal")
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the terminal prompt for request %s failed", request.id)
            await broker.cancel(request.id, "the terminal prompt failed", by=self.by, via="terminal")

    async def _answer_once(self, broker: Broker, request: Request) -> bool | None:
        """Ask every ask once and send the answer: True if it settled the request, False if
        something else settled it first, None to ask again after a bad answer."""
        answers: dict[str, Any] = {}
        comment = ""
        denied = False
        for ask in request.asks:
            if denied and not ask.required:
                continue
            value = await self._ask(ask)
            if value is _SKIP:
                continue
            answers[ask.id] = value
            if request.kind == "approval" and ask.as_verdict() is not None and value is False:
                denied = True
                comment = await self._line("Reason (optional, shown to the agent as written): ")
        answer: Any = Answers(answers)  # by ask id, even when the one optional ask was skipped
        try:
            return await broker.resolve(request.id, answer, by=self.by or request.to, via="terminal", comment=comment)
        except InvalidAnswer as exc:
            self._say(f"  ! {exc}; please answer again")
            return None

    async def _ask(self, ask: Ask) -> Any:
        """Show the ask as it renders for a terminal and read a line until it parses
        (`terminal_prompt`, `from_line`); the broker checks the answer itself."""
        optional = "" if ask.required else " (optional: press enter to skip)"
        lines, prompt = ask.terminal_prompt(optional)
        for line in lines:
            self._say(line)
        while True:
            typed = await self._lines(prompt) if getattr(ask, "multiline", False) else await self._line(prompt)
            if not typed.strip() and not ask.required:
                return _SKIP
            try:
                return ask.from_line(typed)
            except InvalidAnswer as exc:
                self._say(f"  ! {exc}")

    # -- terminal I/O ----------------------------------------------------------------------

    def _show(self, request: Request) -> None:
        label = "approval" if request.kind == "approval" else "question"
        asker = request.origin.agent or request.requester
        self._say(f"\n== interlock {label} {request.id}" + (f" from {asker}" if asker else ""))
        if request.title:
            self._say(request.title)
        if request.details:
            self._say(request.details)

    def _say(self, text: str) -> None:
        out = self._output or sys.stdout
        out.write(text + "\n")
        out.flush()

    async def _line(self, prompt: str) -> str:
        out = self._output or sys.stdout
        out.write(prompt)
        out.flush()
        pending = self._reader()
        if pending.done() and pending.result() != "" and self._typed():
            # typed before this prompt showed: meant for one answered elsewhere
            self._reading = None
            pending = self._reader()
        # Shielded: a prompt cut short leaves the read in flight for the next prompt.
        line = await asyncio.shield(pending)
        if self._reading is pending:  # another reader may have started the next read already
            self._reading = None
            self._taken.set()
        if line == "":
            raise EOFError
        return line.rstrip("\r\n")

    async def _lines(self, prompt: str) -> str:
        """Several lines, up to an empty one (which ends the answer, and is not part of it) or
        the end of input."""
        lines: list[str] = []
        while True:
            try:
                line = await self._line(prompt if not lines else "  ")
            except EOFError:
                if not lines:
                    raise
                return "\n".join(lines)  # the end of input ends the answer too
            if not line.strip():
                return "\n".join(lines)
            lines.append(line)

    def _reader(self) -> asyncio.Future[str]:
        """The read in flight on the input, started if there is none."""
        loop = asyncio.get_running_loop()
        pending = self._reading
        if pending is None or pending.get_loop() is not loop:
            pending = self._reading = loop.create_future()
            stream = self._input or sys.stdin
            reader = threading.Thread(
                target=_read_line, args=(stream, loop, pending), daemon=True, name="interlock-tty"
            )
            reader.start()
        return pending

    def _typed(self) -> bool:
        """Whether the input is a terminal, where lines are typed as prompts show (rather
        than a pipe or a file, whose lines were all written for the prompts to come)."""
        stream = self._input or sys.stdin
        try:
            return stream.isatty()
        except (AttributeError, ValueError, OSError):  # closed, or no file behind it
            return False

    async def input_closed(self) -> None:
        """Return once the input reaches its end (Ctrl-D), even between prompts. Lines
        typed on a terminal while no prompt shows are dropped, as they are meant for no
        request; a pipe's lines wait for the prompts to come."""
        while True:
            pending = self._reader()
            line = await asyncio.shield(pending)
            if line == "":
                return
            if self._reading is not pending:
                continue  # a prompt took it
            if self._typed():
                self._reading = None
            else:
                self._taken.clear()
                await self._taken.wait()


def _read_line(stream: TextIO, loop: asyncio.AbstractEventLoop, into: asyncio.Future[str]) -> None:
    """Read one line on this (daemon) thread and hand it to the loop."""
    try:
        line = stream.readline()
    except Exception as exc:
        error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(_set_exception, into, error)
        return
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_set_result, into, line)


def _set_result(future: asyncio.Future[str], line: str) -> None:
    if not future.done():
        future.set_result(line)


def _set_exception(future: asyncio.Future[str], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
