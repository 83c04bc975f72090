"""Requests, asks, answers and events: pure data and validation, no I/O.

A request asks a person one or more things (its *asks*). Each ask type knows how to check
an answer; `check_answers` checks a whole answer against a request and returns the
normalised answers by ask id, or raises `InvalidAnswer` naming the ask and the fault.
The `*_to_dict` / `*_from_dict` functions give the JSON shape used by every store and
surface, so that a request reads the same from SQLite, PostgreSQL and the HTTP API.

Each ask type is the one place that knows its kind: its JSON shape (`to_dict`), and how
each surface reads an answer to it or shows it: command-line words (`from_words`), a
Novo-compatible input response (`from_input`; the options it picks from, `input_options`,
and whether it picks several, `picks_several`), a web form's posted fields (`from_fields`,
`inputs`; an approval's edit of the tool arguments, `edit_fields` and `edited`), a line
typed at a terminal (`terminal_prompt`, `from_line`), an auto-resolve decision
(`from_decision`), an answer shown back as text (`answer_text`) and the answers one click
can give (`one_click_answers`; a choice may take its own text besides, `allow_other`). It
also says whether it can decide an approval (`as_verdict`, a confirm's yes or no) and
whether checking an answer to it costs enough to be done off the event loop
(`costly_to_check`, a form's schema). Surfaces call these instead of branching on the
ask's class. A surface that shows asks in its own vocabulary (Slack's Block Kit) keeps one
table from ask kind to its renderer, made by `by_ask_kind`, which refuses a table that
lacks a kind. Yes and no are the same words everywhere (`YES_WORDS`, `NO_WORDS`, `yes_no`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import json
import math
import os
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeAlias, TypeVar, cast

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information; used through _regex below

from ._form_inputs import Field as FormInput
from ._form_inputs import FieldValues, form_fields, form_unchanged, form_values, place_in, read_form
from .durations import LONGEST, SHORTEST
from .errors import InvalidAnswer, InvalidRequest

if TYPE_CHECKING:  # jsonschema is loaded by forms alone (`_form_schema`): it is a third of `import interlock`
    from jsonschema import ValidationError

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_PROMPT_LENGTH",
    "DEFAULT_PAUSE_TIMEOUT",
    "MAX_DEPTH",
    "MAX_STATE_BYTES",
    "RUN_EVENTS",
    "Answers",
    "Ask",
    "Choice",
    "Confirm",
    "Deny",
    "Claim",
    "claim_from_dict",
    "claim_to_dict",
    "Event",
    "Form",
    "Grant",
    "GrantPolicy",
    "InputHook",
    "IssuedGrant",
    "Kind",
    "Limits",
    "MultiChoice",
    "Option",
    "Origin",
    "Request",
    "Response",
    "Run",
    "RunStatus",
    "Status",
    "NO_WORDS",
    "Text",
    "YES_WORDS",
    "ask_from_dict",
    "ask_to_dict",
    "build_request",
    "by_ask_kind",
    "check_answers",
    "check_ask",
    "check_echo",
    "check_json",
    "check_text",
    "creation_time",
    "decision_ask",
    "epoch_microseconds",
    "from_epoch_microseconds",
    "grant_event_data",
    "grant_from_dict",
    "grant_record",
    "grant_to_dict",
    "issue_grants",
    "issued_grant_from_dict",
    "issued_grant_to_dict",
    "new_id",
    "offered_grants",
    "options_of",
    "origin_from_dict",
    "origin_to_dict",
    "plain_id",
    "request_from_dict",
    "request_to_dict",
    "run_event_data",
    "run_from_dict",
    "run_to_dict",
    "show_hidden",
    "time_budget",
    "yes_no",
]

DEFAULT_MAX_PROMPT_LENGTH = 20_000
MAX_DEPTH = 32
"""How deeply any JSON value (context, data, answers, a form schema with its `$ref`s
followed) may nest: a safety bound that keeps validation off Python's recursion limit."""

_KiB = 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """How large the parts of a request, an answer and an update may be.

    The broker checks them on every surface (the Python API, the HTTP API, the web inbox,
    the CLI); a part over its limit is refused with `InvalidRequest` (or `InvalidAnswer`)
    naming the field. Lengths count characters; `*_bytes` count the UTF-8 bytes of the
    compact JSON. `check_seconds` is the time one form answer (or a form schema at
    create) may take to check, in a worker thread, before it is refused.
    """

    max_prompt_length: int = DEFAULT_MAX_PROMPT_LENGTH
    max_title_length: int = 1_000
    max_details_length: int = 100_000
    max_name_length: int = 256
    """Ids, names and keys: recipient, requester, idempotency key, ask and option ids,
    the origin's session, channel, agent, run and the like, filters and cursors."""
    max_context_bytes: int = 64 * _KiB
    max_origin_bytes: int = 256 * _KiB
    """The whole origin, the tool call's arguments included."""
    max_asks: int = 50
    max_options: int = 500
    max_schema_bytes: int = 64 * _KiB
    max_message_length: int = DEFAULT_MAX_PROMPT_LENGTH
    """An update's (`inform`) message."""
    max_data_bytes: int = 64 * _KiB
    """An update's (`inform`) data."""
    max_answer_bytes: int = 256 * _KiB
    max_reason_length: int = 20_000
    """A comment or reason given with an answer, a rejection or a cancel."""
    check_seconds: float = 1.0

    def __post_init__(self) -> None:
        for name in Limits.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or math.isinf(value):
                raise ValueError(f"limit {name} must be a positive, finite number, not {value!r}")


DEFAULT_LIMITS = Limits()

# -- text and JSON that can be stored -------------------------------------------------------

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _fault(char: str) -> str:
    if char == "\x00":
        return "contains a NUL character, which cannot be stored"
    return f"contains a lone surrogate ({char!r}), which is not valid Unicode"


_HIDDEN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]"
)


_WORD = re.compile(r"[^\W_]+")


def search_words(text: str) -> tuple[str, ...]:
    """The words of a search, as a store's query takes them: lower case, letters and
    digits (at most 16, each at most 64 characters)."""
    return tuple(dict.fromkeys(w[:64] for w in _WORD.findall(text.lower())))[:16]


def text_words(texts: Sequence[str]) -> set[str]:
    """The words of a request's texts, as a store that keeps no index matches them."""
    return {w for text in texts for w in _WORD.findall(text.lower())}


def show_hidden(text: str) -> str:
    """`text` with each character a reader cannot see, or that reorders what they see,
    written out as `\\uXXXX`: control characters but line breaks and tabs, bidirectional
    controls (a right-to-left override shows `evil.exe` as `exe.live`), zero-width spaces
    and joiners, a byte order mark. What a person approves is then what they read."""
    return _HIDDEN.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def check_text(
    value: object,
    field: str,
    max_length: int | None = None,
    *,
    error: type[InvalidRequest] | type[InvalidAnswer] = InvalidRequest,
) -> None:
    """Refuse a string that cannot be stored everywhere (a NUL, a lone surrogate) or is
    longer than `max_length` characters. None passes; any other non-string is refused."""
    if value is None:
        return
    if not isinstance(value, str):
        raise error(f"{field} must be a string")
    if max_length is not None and len(value) > max_length:
        raise error(f"{field} is {len(value)} characters, at most {max_length} allowed")
    if value.isascii() and "\x00" not in value:
        return  # the common case, without the pattern: ASCII holds no lone surrogate
    bad = _UNSTORABLE.search(value)
    if bad is not None:
        raise error(f"{field} {_fault(bad.group())}")


def _plain_json_size(value: object) -> int | None:
    """The size of `value` as compact JSON when that is plain to see (null, a boolean, a
    string of printable ASCII that needs no escape), else None."""
    if value is None or value is True:
        return 4
    if value is False:
        return 5
    if type(value) is str and value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return len(value) + 2
    return None


def _plain_json(value: object, depth: int = 1) -> bool:
    """Whether `value` is, at a glance, JSON every store keeps as given: made of dicts with
    string keys, lists, tuples, strings, ints, bools, None and finite floats of exactly
    those types, no string holding a NUL or a lone surrogate, nested at most `MAX_DEPTH`.
    False only means "look closer" (`check_json` then walks it, to say what is wrong)."""
    kind = type(value)
    if kind is str:
        return _UNSTORABLE.search(value) is None  # type: ignore[call-overload]
    if value is None or kind is int or kind is bool:
        return True
    if kind is float:
        return math.isfinite(value)  # type: ignore[arg-type]
    if depth > MAX_DEPTH:
        return False
    if kind is dict:
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) is not str or _UNSTORABLE.search(key) is not None:
                return False
            if type(item) is str:
                if _UNSTORABLE.search(item) is not None:
                    return False
            elif not _plain_json(item, depth + 1):
                return False
        return True
    if kind is list or kind is tuple:
        return all(_plain_json(item, depth + 1) for item in value)  # type: ignore[attr-defined]
    return False


def check_json(
    value: object,
    field: str,
    max_bytes: int | None = None,
    *,
    error: type[InvalidRequest] | type[InvalidAnswer] = InvalidRequest,
    ask_id: str | None = None,
) -> int:
    """Refuse a value that is not plain JSON every store keeps as given: NaN and
    Infinity (not JSON numbers), NUL characters and lone surrogates in any string or key,
    nesting deeper than `MAX_DEPTH`, and (with `max_bytes`) more than that many bytes of
    compact JSON. Return its size in bytes."""

    size = _plain_json_size(value)
    if size is not None and (max_bytes is None or size <= max_bytes):
        return 0 if max_bytes is None else size  # null, a boolean or a plain string: nothing to walk or encode

    def fail(message: str) -> InvalidRequest | InvalidAnswer:
        if error is InvalidAnswer:
            return InvalidAnswer(f"{field}: {message}", ask_id=ask_id)
        return error(f"{field}: {message}")

    if size is not None:
        raise fail(f"{size} bytes of JSON, at most {max_bytes} allowed")
    if _plain_json(value):
        if max_bytes is None:
            return 0
        size = len(_compact(value).encode())
        if size > max_bytes:
            raise fail(f"{size} bytes of JSON, at most {max_bytes} allowed")
        return size
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            bad = _UNSTORABLE.search(item)
            if bad is not None:
                raise fail(f"a string {_fault(bad.group())}")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise fail(f"{item} is not a JSON number (NaN and Infinity are refused)")
        elif item is None or isinstance(item, bool | int):
            pass
        elif isinstance(item, Mapping | list | tuple):
            if depth > MAX_DEPTH:
                raise fail(f"nested more than {MAX_DEPTH} levels deep")
            if isinstance(item, Mapping):
                for key in item:
                    if not isinstance(key, str):
                        raise fail(f"an object key must be a string, not {_kind_of(key)}")
                    bad = _UNSTORABLE.search(key)
                    if bad is not None:
                        raise fail(f"an object key {_fault(bad.group())}")
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)
        else:
            raise fail(f"{type(item).__name__} is not a JSON value")
    if max_bytes is None:
        return 0
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    if size > max_bytes:
        raise fail(f"{size} bytes of JSON, at most {max_bytes} allowed")
    return size


# -- checking form answers: linear-time patterns, on a time budget ---------------------------


class _Budget(threading.local):
    deadline = math.inf  # on the monotonic clock: cheap to read at every keyword
    working = math.inf  # on this thread's CPU clock: what the budget bounds
    seconds = math.inf


_budget = _Budget()


class _Overrun(Exception):
    """The thread's time budget ran out in the middle of checking."""


class _BadPattern(Exception):
    """A pattern the linear-time engine cannot run (from a schema stored before it was required)."""


@contextlib.contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Bound the form checks run in this thread, from now, to `seconds` of its work: a check
    that works longer is refused (`InvalidAnswer` for an answer, `InvalidRequest` for a
    schema). Time the thread spends waiting for a core or for the interpreter's lock (a
    busy host, a busy event loop beside it) does not count against it."""
    previous = _budget.deadline, _budget.working, _budget.seconds
    _budget.deadline, _budget.working, _budget.seconds = (
        time.monotonic() + seconds,
        time.thread_time() + seconds,
        seconds,
    )
    try:
        yield
    finally:
        _budget.deadline, _budget.working, _budget.seconds = previous


def _over_budget() -> bool:
    """Whether this thread has worked past its budget. The monotonic clock is read at each
    keyword; the thread's CPU clock (a system call) only once that one says the budget may
    be spent, and time spent waiting moves the monotonic deadline on by what is left."""
    now = time.monotonic()
    if now <= _budget.deadline:
        return False
    left = _budget.working - time.thread_time()
    if left <= 0:
        return True
    _budget.deadline = now + left
    return False


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=512)
def _regex(pattern: str) -> Any:
    """The pattern compiled by RE2, which matches in time linear in the text (no
    backtracking); raises `re2.error` for what RE2 cannot run (backreferences, lookaround)."""
    return re2.compile(pattern, _RE2_OPTIONS)


def _search(pattern: str, text: str) -> bool:
    try:
        regex = _regex(pattern)
    except re2.error:
        raise _BadPattern(pattern) from None
    return regex.search(text) is not None


Kind: TypeAlias = Literal["question", "approval"]
KINDS: frozenset[str] = frozenset({"question", "approval"})


class Status(enum.StrEnum):
    """Where a request is in its life. `pending` moves to exactly one terminal state."""

    PENDING = "pending"
    ANSWERED = "answered"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def settled(self) -> bool:
        return self is not Status.PENDING


# -- yes and no -------------------------------------------------------------------------

YES_WORDS: frozenset[str] = frozenset({"yes", "y", "true", "1", "approve", "approved", "allow", "ok", "accept"})
NO_WORDS: frozenset[str] = frozenset({"no", "n", "false", "0", "deny", "denied", "reject", "refuse"})
"""The words every surface takes as yes or no (a confirm's answer, an approval's verdict, an
auto-resolve decision), compared ignoring case and surrounding spaces."""


def yes_no(word: str | bool) -> bool | None:
    """True for a yes word (`YES_WORDS`), False for a no word (`NO_WORDS`), None otherwise."""
    if isinstance(word, bool):
        return word
    said = word.strip().lower()
    if said in YES_WORDS:
        return True
    if said in NO_WORDS:
        return False
    return None


def _yes_or_no(ask_id: str, word: str) -> bool:
    verdict = yes_no(word)
    if verdict is None:
        raise InvalidAnswer(
            f"ask {ask_id!r}: answer yes or no (or approve or deny), not {word.strip()!r}", ask_id=ask_id
        )
    return verdict


# -- ids ---------------------------------------------------------------------------------

_id_lock = threading.Lock()
_id_last_ms = 0
_id_last_rand = 0


_HEX_ID = re.compile(r"0[xX][0-9a-fA-F]{32}")


def plain_id(request_id: str) -> str:
    """A request id as stored. Ids are 32 hex digits; a client that sends them as hex
    numbers (`0x` and the digits) names the same request."""
    if _HEX_ID.fullmatch(request_id):
        return request_id[2:].lower()
    return request_id


def derived_key(kind: str, *parts: str | None, spelled: str | None = None) -> str:
    """An idempotency key that names one thing of `kind` by `parts` (a run, a session, a
    call id...). `spelled` is the key as interlock 0.1.0 wrote it, parts joined with `:`,
    which the caller passes only where that spelling reads one way: it is kept when it
    fits the limit on names, so that what was stored under it is found again. Otherwise
    the key is hashed from an encoding of `parts` that cannot be read two ways (parts
    that hold the separator or spell alike, as a session named `run=R1`, make other
    keys), and fits the limit however long the parts are."""
    if spelled is not None and len(spelled) <= DEFAULT_LIMITS.max_name_length:
        return spelled
    return f"{kind}:" + hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def new_id() -> str:
    """A 32-character id that sorts by creation time: a 48-bit millisecond timestamp and
    80 random bits, in hex; within a process, later ids always sort after earlier ones."""
    global _id_last_ms, _id_last_rand
    with _id_lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _id_last_ms:
            ms = _id_last_ms
            rand = _id_last_rand + 1
        else:
            rand = int.from_bytes(os.urandom(10), "big") >> 1  # leaves room to increment
            _id_last_ms = ms
        _id_last_rand = rand
    # rand stays below 2**80: 12 hex digits of ms, then 20 of rand (cheaper than formatting them)
    return (ms << 80 | rand).to_bytes(16, "big").hex()


_made_lock = threading.Lock()
_made_last_us = 0
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_FLOAT_EXACT = 2**52
"""Microseconds from the epoch (to 2112 either way) within which a float's quotient gives
the time back exactly, three times as fast as counting it out."""


def epoch_microseconds(at: datetime) -> int:
    """`at` as the whole microseconds since the epoch (a naive time is local time, as
    `timestamp()` takes it), counted exactly: a float's `timestamp()` is off by
    microseconds in the far future, and rounds the last instant there is up into a year
    no datetime holds."""
    if at.tzinfo is None:
        at = at.astimezone()
    return (at - _EPOCH) // _MICROSECOND


def from_epoch_microseconds(us: int) -> datetime:
    """The time (in UTC) `us` microseconds after the epoch; `OverflowError` past the
    years 1 to 9999."""
    if -_FLOAT_EXACT < us < _FLOAT_EXACT:
        return datetime.fromtimestamp(us / 1_000_000, UTC)
    return _EPOCH + timedelta(microseconds=us)


def creation_time() -> datetime:
    """Now, as the time something is made that lists by when it was made (a run): within
    a process, each call returns a later time than the call before (by a microsecond, the
    stores' precision, when the clock has not moved on), so what is made later lists
    after what was made before it, however close together."""
    global _made_last_us
    with _made_lock:
        us = max(time.time_ns() // 1000, _made_last_us + 1)
        _made_last_us = us
    return from_epoch_microseconds(us)


# -- frozen records, built cheaply ---------------------------------------------------------

_T = TypeVar("_T")


class _Factory:
    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()  # the default shown for a field made by a factory, as dataclasses shows it


def _quick_init(cls: type[_T]) -> type[_T]:
    """Give a frozen, slotted dataclass an `__init__` that stores each field through its
    slot: the same signature, defaults and factories (and `__post_init__`, when it has
    one), at about half the cost of the generated one (which calls `object.__setattr__`
    per field). Requests, responses and asks are built for every request, so this is on
    the hot path.

    A class without `__post_init__` also gets `_make`, the same constructor taking the
    fields in order, cheaper again: it fills a plain twin of the class (the same slots,
    no frozen `__setattr__`) with ordinary stores, then gives it the class. The package
    builds its own records with it; `__init__` stays what callers and `replace` use. And
    `_copy_with`, a copy with some fields changed built the same way (`evolve`)."""
    fields_ = dataclasses.fields(cls)  # type: ignore[arg-type]  # only applied to dataclasses
    names: dict[str, Any] = {"_FACTORY": _FACTORY}
    params, body, stores = [], [], []
    for i, f in enumerate(fields_):
        if not f.init or f.kw_only:
            raise TypeError(f"{cls.__name__}.{f.name}: _quick_init takes plain fields only")
        names[f"_set{i}"] = cls.__dict__[f.name].__set__
        if f.default is not dataclasses.MISSING:
            names[f"_default{i}"] = f.default
            params.append(f"{f.name}=_default{i}")
        elif f.default_factory is not dataclasses.MISSING:
            names[f"_factory{i}"] = f.default_factory
            params.append(f"{f.name}=_FACTORY")
            body.append(f"    if {f.name} is _FACTORY: {f.name} = _factory{i}()")
        else:
            params.append(f.name)
        body.append(f"    _set{i}(self, {f.name})")
        stores.append(f"    self.{f.name} = {f.name}")
    post_init = hasattr(cls, "__post_init__")
    if post_init:
        body.append("    self.__post_init__()")
    source = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body) + "\n"
    if not post_init:
        factories = [line for line in body if line.startswith("    if ")]
        names["_twin"] = type(f"_{cls.__name__}Slots", (), {"__slots__": cls.__slots__})  # type: ignore[attr-defined]  # slotted
        names["_cls"], names["_new"] = cls, object.__new__
        source += (
            f"def _make({', '.join(params)}):\n"
            + "".join(line + "\n" for line in factories)
            + "    self = _new(_twin)\n"
            + "\n".join(stores)
            + "\n    self.__class__ = _cls\n    return self\n"
        )
        source += (
            "def _copy_with(self, changes):\n"
            + "    new = _new(_twin)\n"
            + "".join(f"    new.{f.name} = self.{f.name}\n" for f in fields_)
            + "    for name, value in changes.items():\n"
            + "        _set_plain(new, name, value)\n"
            + "    new.__class__ = _cls\n    return new\n"
        )
        names["_set_plain"] = setattr
    exec(source, names)  # built only from the dataclass's own field names
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = dict(cls.__init__.__annotations__)  # the signature reads as the generated one
    cls.__init__ = init  # type: ignore[method-assign]  # replacing the generated one is the point
    if not post_init:
        make = names["_make"]
        make.__qualname__ = f"{cls.__qualname__}._make"
        cls._make = staticmethod(make)  # type: ignore[attr-defined]  # declared as a ClassVar by the class
        names["_copy_with"].__qualname__ = f"{cls.__qualname__}._copy_with"
        cls._copy_with = names["_copy_with"]  # type: ignore[attr-defined]  # reached through `evolve`
        required = [f for f in fields_ if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        make(*(None for _ in required))  # the twin fits its class: fails on import, not on first use
    return cls


def evolve(record: _T, /, **changes: Any) -> _T:
    """A copy of `record` with `changes`, as `dataclasses.replace` makes it, for the
    records `_quick_init` builds without a `__post_init__` (a run, a request, a response,
    an event, a delivery), at about a quarter of its cost: nothing is checked, so a field
    it does not have raises `AttributeError`. A run changes several times on each resume."""
    return type(record)._copy_with(record, changes)  # type: ignore[attr-defined, no-any-return]  # made by `_quick_init`


# -- asks --------------------------------------------------------------------------------


# -- capability grants -------------------------------------------------------------------

DEFAULT_EXP: Literal["default"] = "default"
"""A grant offered without `exp`: it ends the venue's default time after it is issued."""
MAX_EXP = 253_402_300_799
"""The latest `exp` a grant may give: 9999-12-31T23:59:59Z, the last second a date holds."""


@dataclass(frozen=True, slots=True)
class Grant:
    """A capability offered on a confirm ask or on an option: `can` on `with_` (`with` in
    JSON), until `exp` (unix seconds; None for no expiry; omitted for the venue's default).

    It is issued only if the person makes the choice that carries it (approves the confirm
    ask, selects the option) and echoes it in the response (see `issue_grants`).
    """

    with_: str
    can: str
    exp: int | Literal["default"] | None = DEFAULT_EXP

    def __post_init__(self) -> None:
        for name, value in (("with", self.with_), ("can", self.can)):
            if not isinstance(value, str) or not value.strip():
                raise InvalidRequest(f"a grant needs a non-empty string `{name}`")
        exp = self.exp
        if exp != DEFAULT_EXP and exp is not None and (isinstance(exp, bool) or not isinstance(exp, int) or exp < 0):
            raise InvalidRequest("a grant's exp must be unix seconds (a non-negative integer), or null for no expiry")
        if isinstance(exp, int) and exp > MAX_EXP:
            raise InvalidRequest(
                f"a grant's exp is {exp}, past the last date there is ({MAX_EXP}, 9999-12-31): give null for no expiry"
            )

    def describe(self) -> str:
        """The grant in words, as the inbox and the terminal show it beside its choice."""
        if self.exp == DEFAULT_EXP:
            until = "for the venue's default time"
        elif self.exp is None:
            until = "with no expiry"
        else:
            until = f"until {datetime.fromtimestamp(self.exp, UTC).strftime('%Y-%m-%d %H:%M UTC')}"
        return f"grant {self.can} on {self.with_} {until}"


def grant_to_dict(grant: Grant) -> dict[str, Any]:
    """The grant's JSON shape: `exp` is left out when the offer takes the venue's default."""
    out: dict[str, Any] = {"with": grant.with_, "can": grant.can}
    if grant.exp != DEFAULT_EXP:
        out["exp"] = grant.exp
    return out


def grant_from_dict(data: object, where: str = "a grant") -> Grant:
    """A grant from its JSON shape `{with, can, exp?}`; anything else raises `InvalidRequest`."""
    if isinstance(data, Grant):
        return data
    if not isinstance(data, Mapping):
        raise InvalidRequest(f"{where} must be an object {{with, can, exp?}}")
    unknown = set(data) - {"with", "can", "exp"}
    if unknown:
        raise InvalidRequest(f"{where}: unknown field(s) {sorted(unknown)}; a grant is {{with, can, exp?}}")
    if "with" not in data or "can" not in data:
        raise InvalidRequest(f"{where} needs both `with` and `can`")
    try:
        return Grant(data["with"], data["can"], data.get("exp", DEFAULT_EXP))
    except InvalidRequest as exc:
        raise InvalidRequest(f"{where}: {exc}") from None


def _grants(where: str, raw: Iterable[Grant | Mapping[str, Any]]) -> tuple[Grant, ...]:
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Iterable):
        raise InvalidRequest(f"{where}: grants must be a list of {{with, can, exp?}}")
    grants = tuple(grant_from_dict(item, f"{where}: a grant") for item in raw)
    seen: set[tuple[str, str]] = set()
    for grant in grants:
        if (grant.with_, grant.can) in seen:
            raise InvalidRequest(f"{where}: the grant {grant.can!r} on {grant.with_!r} is offered twice")
        seen.add((grant.with_, grant.can))
    return grants


@dataclass(frozen=True, slots=True)
class GrantPolicy:
    """How long issued grants last at this venue: `default_seconds` for an offer without
    `exp` (7 days), and, when set, `ceiling_seconds`: an offer that would last longer
    (an `exp` further away, or no expiry) is refused when the request is created."""

    default_seconds: float = 7 * 24 * 3600
    ceiling_seconds: float | None = None

    def __post_init__(self) -> None:
        for name in ("default_seconds", "ceiling_seconds"):
            value = getattr(self, name)
            if value is None and name == "ceiling_seconds":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or math.isinf(value):
                raise ValueError(f"{name} must be a positive, finite number of seconds, not {value!r}")
            if value < SHORTEST:  # kept as no time at all: a grant that ended as it was issued
                raise ValueError(f"{name} is {value:g} seconds, less than the microsecond times are kept in")
            if value > LONGEST:  # a grant issued then would end past the last date there is
                raise ValueError(f"{name} is {value:g} seconds, more than a thousand years")

    def check_offer(self, grant: Grant, where: str, now: datetime) -> None:
        """Refuse an offer that ended already, or would last past the ceiling."""
        if isinstance(grant.exp, int) and grant.exp <= now.timestamp():
            raise InvalidRequest(f"{where}: the grant {grant.can!r} on {grant.with_!r} has an exp in the past")
        ceiling = self.ceiling_seconds
        if ceiling is None:
            return
        last = now.timestamp() + ceiling
        if grant.exp is None:
            raise InvalidRequest(
                f"{where}: the grant {grant.can!r} on {grant.with_!r} asks for no expiry, but grants here last "
                f"at most {_seconds_text(ceiling)}; give an exp up to {int(last)}"
            )
        if isinstance(grant.exp, int) and grant.exp > last:
            raise InvalidRequest(
                f"{where}: the grant {grant.can!r} on {grant.with_!r} would last until {grant.exp}, past this "
                f"venue's ceiling of {_seconds_text(ceiling)} (exp at most {int(last)})"
            )

    def expiry(self, grant: Grant, issued_at: datetime) -> datetime | None:
        """When a grant issued at `issued_at` from this offer ends (None: never)."""
        if grant.exp is None:
            return None
        if isinstance(grant.exp, int):
            return datetime.fromtimestamp(grant.exp, UTC)
        seconds = self.default_seconds
        if self.ceiling_seconds is not None:
            seconds = min(seconds, self.ceiling_seconds)
        return issued_at + timedelta(seconds=seconds)


DEFAULT_GRANT_POLICY = GrantPolicy()


def _seconds_text(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{seconds:g} second{'' if seconds == 1 else 's'}"


@dataclass(frozen=True, slots=True)
class IssuedGrant:
    """A grant as issued: `issuer` (the person who consented) lets `audience` (who asked)
    do `can` on `with_` until `expires_at` (None: no expiry), unless revoked.

    `request_id`, `ask_id` and `option_id` say which choice issued it; a grant given
    directly (a delegation) has none.

    `issuer_cut_off` is not stored: it says, as the grant is read (`Broker.list_grants`,
    `get_grant`), that its issuer is a person `interlock token revoke` cut off, so that it
    authorizes nothing while they are, though it is neither revoked nor expired; `token
    create ISSUER --human` gives them a token again and the grant is in force again."""

    id: str
    with_: str
    can: str
    issuer: str | None
    audience: str | None
    issued_at: datetime
    expires_at: datetime | None = None
    request_id: str | None = None
    ask_id: str | None = None
    option_id: str | None = None
    revoked_at: datetime | None = None
    revoked_by: str | None = None
    issuer_cut_off: bool = False

    def live(self, at: datetime) -> bool:
        """Not revoked and not expired at `at` (of what is stored: see `issuer_cut_off`)."""
        return self.revoked_at is None and (self.expires_at is None or at < self.expires_at)


def issued_grant_to_dict(grant: IssuedGrant) -> dict[str, Any]:
    """The grant's JSON as it is read: what is stored of it (`grant_record`), and whether
    its issuer is cut off (`issuer_cut_off`)."""
    return {**grant_record(grant), "issuer_cut_off": grant.issuer_cut_off}


def grant_record(grant: IssuedGrant) -> dict[str, Any]:
    """The grant's JSON as an answer and the event log keep it: what is stored of it, with
    no `issuer_cut_off` (which holds only while the issuer is cut off, as it is read)."""
    return {
        "id": grant.id,
        "with": grant.with_,
        "can": grant.can,
        "issuer": grant.issuer,
        "audience": grant.audience,
        "issued_at": grant.issued_at.isoformat(),
        "expires_at": _ts(grant.expires_at),
        "exp": int(grant.expires_at.timestamp()) if grant.expires_at is not None else None,
        "request_id": grant.request_id,
        "ask_id": grant.ask_id,
        "option_id": grant.option_id,
        "revoked_at": _ts(grant.revoked_at),
        "revoked_by": grant.revoked_by,
    }


def issued_grant_from_dict(data: Mapping[str, Any]) -> IssuedGrant:
    return IssuedGrant(
        id=data["id"],
        with_=data["with"],
        can=data["can"],
        issuer=data.get("issuer"),
        audience=data.get("audience"),
        issued_at=datetime.fromisoformat(data["issued_at"]),
        expires_at=_dt(data.get("expires_at")),
        request_id=data.get("request_id"),
        ask_id=data.get("ask_id"),
        option_id=data.get("option_id"),
        revoked_at=_dt(data.get("revoked_at")),
        revoked_by=data.get("revoked_by"),
        issuer_cut_off=bool(data.get("issuer_cut_off", False)),  # (absent from a server before it)
    )


def grant_event_data(grant: IssuedGrant) -> dict[str, Any]:
    """The data of a `granted` or `grant_revoked` event: the grant, and whom it concerns
    (`to`: the audience, `by`: the issuer), so each of them sees it in their event log."""
    return {"grant": grant_record(grant), "to": grant.audience, "by": grant.issuer, "request": grant.request_id}


def offered_grants(request: Request) -> list[tuple[str, str | None, Grant]]:
    """Every grant the request offers: (ask id, option id or None, grant)."""
    return [(ask.id, option, grant) for ask in request.asks for option, grant in ask.offered()]


def check_echo(echo: object, max_count: int | None = None) -> list[Grant]:
    """The grants an answer's echo names (see `issue_grants`), or `InvalidAnswer` for an
    echo that is not a list of {with, can, exp?} (of at most `max_count`)."""
    if isinstance(echo, str | bytes | Mapping) or not isinstance(echo, Sequence):
        raise InvalidAnswer("grants: echo the grants you approve as a list of {with, can}")
    if max_count is not None and len(echo) > max_count:
        # The echo is only compared with the offers (what is issued is built from them),
        # so it is bounded by count, not checked for storage.
        raise InvalidAnswer(f"grants: {len(echo)} echoed, at most {max_count} allowed")
    named = []
    for item in echo:
        try:
            named.append(grant_from_dict(item, "grants: an echoed grant"))
        except InvalidRequest as exc:
            raise InvalidAnswer(str(exc)) from None
    return named


INBOX_RESOURCE = "interlock:inbox/"
"""How the `with` of a grant on a person's inbox begins (`interlock.grants.inbox_resource`)."""


def check_grant_giver(with_: str, issuer: str | None, error: Callable[[str], Exception]) -> None:
    """Refuse a grant on someone's inbox given by anyone else: only `alice` gives a grant on
    `interlock:inbox/alice` (it lets its holder ask her). A grant given by nobody named
    (an operator's, with no `by`) is refused too; every other grant is the application's."""
    if with_.startswith(INBOX_RESOURCE):
        owner = with_[len(INBOX_RESOURCE) :]
        if issuer != owner:
            mine = f"a grant on {with_!r} is {owner}'s alone to give (it lets its holder ask them)"
            raise error(f"{mine}: give it as {owner}" if issuer is None else f"{mine}, not {issuer}'s")


def issue_grants(
    request: Request,
    answers: Mapping[str, Any],
    echo: Sequence[Mapping[str, Any]] | None,
    *,
    issuer: str | None,
    now: datetime,
    policy: GrantPolicy = DEFAULT_GRANT_POLICY,
) -> tuple[IssuedGrant, ...]:
    """The grants an answer issues: exactly those its choices trigger (an approved confirm
    ask, a selected option) AND its `echo` names, built from the offers, never from the
    echo. An echo names a grant by `with` and `can` (and `exp`, when it gives one, must be
    the offer's). An echo of anything the choices did not trigger raises `InvalidAnswer`:
    the whole answer is refused and nothing is issued."""
    if echo is None:
        return ()
    echoed = check_echo(echo)
    triggered: dict[tuple[str, str], list[tuple[str, str | None, Grant]]] = {}
    for ask in request.asks:
        if ask.id in answers:
            for option, grant in ask.triggered(answers[ask.id]):
                triggered.setdefault((grant.with_, grant.can), []).append((ask.id, option, grant))
    chosen: dict[tuple[str, str, object], tuple[str, str | None, Grant]] = {}
    for item, named in zip(echo, echoed, strict=True):
        has_exp = isinstance(item, Mapping) and "exp" in item
        matches = [t for t in triggered.get((named.with_, named.can), ()) if not has_exp or t[2].exp == named.exp]
        if not matches:
            offered = any(g.with_ == named.with_ and g.can == named.can for _, _, g in offered_grants(request))
            why = "your answer did not choose what offers it" if offered else "the request does not offer it"
            raise InvalidAnswer(
                f"grants: {named.can!r} on {named.with_!r} was echoed but not triggered ({why}); "
                "nothing was answered or issued"
            )
        for ask_id, option, grant in matches:
            check_grant_giver(grant.with_, issuer, InvalidAnswer)
            chosen.setdefault((grant.with_, grant.can, grant.exp), (ask_id, option, grant))
    return tuple(
        IssuedGrant(
            id=new_id(),
            with_=grant.with_,
            can=grant.can,
            issuer=issuer,
            audience=request.requester,
            issued_at=now,
            expires_at=policy.expiry(grant, now),
            request_id=request.id,
            ask_id=ask_id,
            option_id=option,
        )
        for ask_id, option, grant in chosen.values()
    )


@dataclass(frozen=True, slots=True)
class Option:
    """One option of a `Choice` or `MultiChoice`; `grants` are offered to whoever selects it."""

    id: str
    label: str = ""
    description: str = ""
    grants: Sequence[Grant | Mapping[str, Any]] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidRequest("an option needs a non-empty string id")
        if not self.label:
            object.__setattr__(self, "label", self.id)
        if self.grants:
            object.__setattr__(self, "grants", _grants(f"option {self.id!r}", self.grants))
        elif not isinstance(self.grants, tuple):
            object.__setattr__(self, "grants", ())


def _check_prompt(type_name: str, ask_id: str, prompt: object) -> None:
    if not isinstance(ask_id, str) or not ask_id:
        raise InvalidRequest(f"a {type_name} ask needs a non-empty string id")
    if not isinstance(prompt, str) or not prompt.strip():
        raise InvalidRequest(f"ask {ask_id!r}: the prompt must be a non-empty string")


def _options(ask_id: str, raw: Iterable[Option | str | Mapping[str, Any]]) -> tuple[Option, ...]:
    opts: list[Option] = []
    for item in raw:
        if isinstance(item, Option):
            opts.append(item)
        elif isinstance(item, str):
            opts.append(Option(id=item))
        elif isinstance(item, Mapping):
            unknown = set(item) - {"id", "label", "description", "grants"}
            if unknown:
                raise InvalidRequest(f"ask {ask_id!r}: unknown option field(s) {sorted(unknown)}")
            opts.append(Option(**item))
        else:
            raise InvalidRequest(f"ask {ask_id!r}: an option must be an Option, a string or a mapping")
    if not opts:
        raise InvalidRequest(f"ask {ask_id!r}: a choice needs at least one option")
    seen: set[str] = set()
    for opt in opts:
        if opt.id in seen:
            raise InvalidRequest(f"ask {ask_id!r}: option id {opt.id!r} is given twice")
        seen.add(opt.id)
    return tuple(opts)


@_quick_init
@dataclass(frozen=True, slots=True)
class Text:
    """Free-form text; `multiline` is a rendering hint, `max_length` a hard limit."""

    prompt: str
    id: str = "text"
    multiline: bool = False
    max_length: int | None = None
    required: bool = True

    type = "text"
    costly_to_check = False
    allow_other = False
    picks_several = False

    def __post_init__(self) -> None:
        _check_prompt(self.type, self.id, self.prompt)
        if self.max_length is not None and (not isinstance(self.max_length, int) or self.max_length < 1):
            raise InvalidRequest(f"ask {self.id!r}: max_length must be a positive integer")

    def check(self, value: object) -> str:
        if not isinstance(value, str):
            raise InvalidAnswer(f"ask {self.id!r}: expected text, got {_kind_of(value)}", ask_id=self.id)
        if self.required and not value.strip():
            raise InvalidAnswer(f"ask {self.id!r}: an answer is required", ask_id=self.id)
        if self.max_length is not None and len(value) > self.max_length:
            raise InvalidAnswer(
                f"ask {self.id!r}: the answer is {len(value)} characters, at most {self.max_length} allowed",
                ask_id=self.id,
            )
        return value

    def to_dict(self) -> dict[str, Any]:
        return {**_ask_head(self), "multiline": self.multiline, "max_length": self.max_length}

    def offered(self) -> tuple[tuple[str | None, Grant], ...]:
        return ()

    def triggered(self, value: Any) -> tuple[tuple[str | None, Grant], ...]:
        return ()

    def from_words(self, words: Sequence[str]) -> Any:
        return " ".join(words)

    def from_input(self, option_id: str | None, option_ids: Sequence[str] | None, text: str | None) -> Any:
        return _text_input(self, text)

    def from_fields(self, values: FieldValues, name: str) -> Any:
        text = values.get(name)
        return text if text or self.required else None

    def inputs(self, name: str) -> tuple[FormInput, ...] | None:
        return None

    def answer_text(self, value: Any) -> str:
        return str(value)

    def terminal_prompt(self, optional: str) -> tuple[list[str], str]:
        if self.multiline:  # read line by line (`TerminalContract`) until an empty one
            return [f"{self.prompt}{optional}", "  (several lines; an empty line ends the answer)"], "> "
        return [], f"{self.prompt}{optional} > "

    def from_line(self, line: str) -> Any:
        return line

    def from_decision(self, word: str) -> Any:
        return word

    def plain(self) -> tuple[Any, ...] | None:
        """Its fields, in order, when each is a plain value (text, a number, a bool, None),
        so `type(self)(*plain)` makes it again; None when one is not. A store keeping many
        requests keeps such asks as plain values, which the garbage collector need not walk."""
        return (self.prompt, self.id, self.multiline, self.max_length, self.required)

    def one_click_answers(self) -> tuple[tuple[str, Any], ...] | None:
        return None

    def input_options(self) -> tuple[tuple[str, str], ...] | None:
        return None

    def as_verdict(self) -> Confirm | None:
        return None

    def edit_fields(self, name: str, arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
        return []

    def edited(self, name: str, values: FieldValues, original: FieldValues) -> bool:
        return True

    def how_to_answer(self) -> str:
        limit = f", at most {self.max_length} characters" if self.max_length is not None else ""
        return f"text{limit}"


def _allowed_values(prop: Mapping[str, Any]) -> str:
    """What a form field takes beyond its type, for a person at a terminal: its allowed
    values (`enum`, `const`, or those of its items), its bounds, its default."""
    items = prop.get("items")
    choices = prop.get("enum")
    if choices is None and "const" in prop:
        choices = [prop["const"]]
    if choices is None and isinstance(items, Mapping):
        choices = items.get("enum")
    parts = []
    if isinstance(choices, list) and choices:
        parts.append("one of " + ", ".join(json.dumps(c, ensure_ascii=False) for c in choices[:20]))
        if len(choices) > 20:
            parts[-1] += f", ... ({len(choices)} in all)"
    for key, word in (
        ("minimum", "at least"),
        ("maximum", "at most"),
        ("minLength", "at least"),
        ("maxLength", "at most"),
    ):
        if isinstance(prop.get(key), int | float) and not isinstance(prop.get(key), bool):
            unit = " characters" if key.endswith("Length") else ""
            parts.append(f"{word} {prop[key]}{unit}")
    if "default" in prop:
        parts.append(f"default {json.dumps(prop['default'], ensure_ascii=False)}")
    return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Confirm:
    """A yes/no question; the answer is a bool."""

    prompt: str
    id: str = "confirm"
    required: bool = True
    grants: Sequence[Grant | Mapping[str, Any]] = ()
    """Offered to the requester if the person approves (answers yes) and echoes them."""

    type = "confirm"
    costly_to_check = False
    allow_other = False
    picks_several = False

    def __post_init__(self) -> None:
        _check_prompt(self.type, self.id, self.prompt)
        if self.grants:
            object.__setattr__(self, "grants", _grants(f"ask {self.id!r}", self.grants))
        elif not isinstance(self.grants, tuple):
            object.__setattr__(self, "grants", ())

    def check(self, value: object) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str):  # the same yes and no words as every other surface
            return _yes_or_no(self.id, value)
        raise InvalidAnswer(f"ask {self.id!r}: expected true or false, got {_kind_of(value)}", ask_id=self.id)

    def to_dict(self) -> dict[str, Any]:
        head = _ask_head(self)
        if self.grants:
            head["grants"] = [grant_to_dict(g) for g in _grants_of(self.grants)]
        return head

    def offered(self) -> tuple[tuple[str | None, Grant], ...]:
        return tuple((None, g) for g in _grants_of(self.grants))

    def triggered(self, value: Any) -> tuple[tuple[str | None, Grant], ...]:
        return self.offered() if value is True else ()

    def from_words(self, words: Sequence[str]) -> Any:
        return _yes_or_no(self.id, " ".join(words))

    def from_input(self, option_id: str | None, option_ids: Sequence[str] | None, text: str | None) -> Any:
        if option_ids is not None:
            raise InvalidAnswer(f"ask {self.id!r}: answer yes or no with optionId, not optionIds", ask_id=self.id)
        if option_id is None:  # its options are yes and no: no free-form text (`allowOther` false)
            fault = f"question {self.id!r} takes optionId 'yes' or 'no', not free-form text"
            raise InvalidAnswer(fault, ask_id=self.id)
        return _yes_or_no(self.id, option_id)

    def from_fields(self, values: FieldValues, name: str) -> Any:
        said = values.get(name).strip()
        if not said:
            return None  # left blank
        verdict = yes_no(said)
        return said if verdict is None else verdict  # another word: `check` says what is wrong

    def inputs(self, name: str) -> tuple[FormInput, ...] | None:
        return None

    def answer_text(self, value: Any) -> str:
        return "Yes" if value else "No"

    def terminal_prompt(self, optional: str) -> tuple[list[str], str]:
        return [], f"{self.prompt} [y/n]{optional} > "

    def from_line(self, line: str) -> Any:
        verdict = yes_no(line)
        if verdict is None:
            raise InvalidAnswer("please answer yes or no", ask_id=self.id)
        return verdict

    def from_decision(self, word: str) -> Any:
        return yes_no(word) is True

    def plain(self) -> tuple[Any, ...] | None:
        return None if self.grants else (self.prompt, self.id, self.required, ())

    def one_click_answers(self) -> tuple[tuple[str, Any], ...] | None:
        return (("Yes", True), ("No", False))

    def input_options(self) -> tuple[tuple[str, str], ...] | None:
        return (("yes", "Yes"), ("no", "No"))

    def as_verdict(self) -> Confirm | None:
        return self

    def edit_fields(self, name: str, arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
        return []

    def edited(self, name: str, values: FieldValues, original: FieldValues) -> bool:
        return True

    def how_to_answer(self) -> str:
        return "yes or no (or approve, deny, ...)"


@dataclass(frozen=True, slots=True)
class Choice:
    """Pick one option by id; with `allow_other`, free text instead of an option is taken."""

    prompt: str
    options: Sequence[Option | str | Mapping[str, Any]] = ()
    id: str = "choice"
    allow_other: bool = False
    required: bool = True

    type = "choice"
    costly_to_check = False
    picks_several = False

    def __post_init__(self) -> None:
        _check_prompt(self.type, self.id, self.prompt)
        object.__setattr__(self, "options", _options(self.id, self.options))

    def check(self, value: object) -> str:
        if not isinstance(value, str):
            raise InvalidAnswer(f"ask {self.id!r}: expected one option id, got {_kind_of(value)}", ask_id=self.id)
        if any(opt.id == value for opt in options_of(self)):
            return value
        if self.allow_other and value.strip():
            return value
        ids = ", ".join(opt.id for opt in options_of(self))
        raise InvalidAnswer(f"ask {self.id!r}: {value!r} is not one of the options ({ids})", ask_id=self.id)

    def to_dict(self) -> dict[str, Any]:
        return {**_ask_head(self), "options": _options_to_list(self), "allow_other": self.allow_other}

    def offered(self) -> tuple[tuple[str | None, Grant], ...]:
        return _option_grants(self, None)

    def triggered(self, value: Any) -> tuple[tuple[str | None, Grant], ...]:
        return _option_grants(self, {value} if isinstance(value, str) else set())

    def from_words(self, words: Sequence[str]) -> Any:
        text = " ".join(words)
        return _match_option(options_of(self), text.strip()) or text

    def from_input(self, option_id: str | None, option_ids: Sequence[str] | None, text: str | None) -> Any:
        if text is not None:  # free form, where the question allows it (`allowOther`)
            if not self.allow_other:
                ids = ", ".join(opt.id for opt in options_of(self))
                raise InvalidAnswer(
                    f"question {self.id!r} takes one of its options by optionId ({ids}), not free-form text",
                    ask_id=self.id,
                )
            return text
        if option_ids is not None:
            if len(option_ids) != 1:
                raise InvalidAnswer(f"question {self.id!r} is single-select: choose one option", ask_id=self.id)
            option_id = option_ids[0]
        if not any(opt.id == option_id for opt in options_of(self)):  # an option must be one offered
            ids = ", ".join(opt.id for opt in options_of(self))
            raise InvalidAnswer(f"ask {self.id!r}: {option_id!r} is not one of the options ({ids})", ask_id=self.id)
        return option_id

    def from_fields(self, values: FieldValues, name: str) -> Any:
        picked, other = values.get(name), values.get(f"{name}.other").strip()
        if picked == self.unanswered_value():  # an optional choice's "Leave unanswered"
            return None
        if picked:
            return picked
        if self.allow_other and other:
            return other
        if values.has(name):
            raise InvalidAnswer(f"ask {self.id!r}: type your answer next to Other", ask_id=self.id)
        return None

    def unanswered_value(self) -> str:
        """What a web form's "Leave unanswered" radio posts for this choice: a value no
        option has (option ids are never empty; the Other radio posts the empty string).
        Radios cannot be unpicked, so an optional choice offers it to take a pick back."""
        ids = {option.id for option in options_of(self)}
        value = "-"
        while value in ids:
            value += "-"
        return value

    def inputs(self, name: str) -> tuple[FormInput, ...] | None:
        return None

    def answer_text(self, value: Any) -> str:
        label = next((o.label for o in options_of(self) if o.id == value), None)
        return label if label is not None else f"Other: {value}"

    def terminal_prompt(self, optional: str) -> tuple[list[str], str]:
        own = ", or your own answer" if self.allow_other else ""
        return _numbered(self, optional), f"(a number or a name{own}) > "

    def from_line(self, line: str) -> Any:
        return _pick(options_of(self), line.strip())

    def from_decision(self, word: str) -> Any:
        options = options_of(self)
        picked = _decided(options, word)
        if picked:
            return picked[0]
        _refusal_picks_nothing(word)
        return word if self.allow_other else options[0].id

    def plain(self) -> tuple[Any, ...] | None:
        return None

    def one_click_answers(self) -> tuple[tuple[str, Any], ...] | None:
        return tuple((option.label or option.id, option.id) for option in options_of(self))

    def input_options(self) -> tuple[tuple[str, str], ...] | None:
        return _labelled(self)

    def as_verdict(self) -> Confirm | None:
        return None

    def edit_fields(self, name: str, arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
        return []

    def edited(self, name: str, values: FieldValues, original: FieldValues) -> bool:
        return True

    def how_to_answer(self) -> str:
        other = ", or your own text" if self.allow_other else ""
        return f"one of {', '.join(o.id for o in options_of(self))}{other}"


@dataclass(frozen=True, slots=True)
class MultiChoice:
    """Pick several options by id, between `min` and `max` of them."""

    prompt: str
    options: Sequence[Option | str | Mapping[str, Any]] = ()
    id: str = "multi_choice"
    min: int = 0
    max: int | None = None
    required: bool = True

    type = "multi_choice"
    costly_to_check = False
    allow_other = False
    picks_several = True

    def __post_init__(self) -> None:
        _check_prompt(self.type, self.id, self.prompt)
        opts = _options(self.id, self.options)
        object.__setattr__(self, "options", opts)
        if not isinstance(self.min, int) or self.min < 0:
            raise InvalidRequest(f"ask {self.id!r}: min must be a non-negative integer")
        if self.max is not None and (not isinstance(self.max, int) or self.max < max(self.min, 1)):
            raise InvalidRequest(f"ask {self.id!r}: max must be an integer >= min and >= 1")
        if self.min > len(opts):
            raise InvalidRequest(f"ask {self.id!r}: min is {self.min} but there are only {len(opts)} options")

    def check(self, value: object) -> list[str]:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise InvalidAnswer(
                f"ask {self.id!r}: expected a list of option ids, got {_kind_of(value)}", ask_id=self.id
            )
        known = {opt.id for opt in options_of(self)}
        seen: set[str] = set()
        for v in value:
            if v not in known:
                ids = ", ".join(opt.id for opt in options_of(self))
                raise InvalidAnswer(f"ask {self.id!r}: {v!r} is not one of the options ({ids})", ask_id=self.id)
            if v in seen:
                raise InvalidAnswer(f"ask {self.id!r}: option {v!r} is selected twice", ask_id=self.id)
            seen.add(v)
        if len(value) < self.min:
            raise InvalidAnswer(f"ask {self.id!r}: select at least {self.min}, got {len(value)}", ask_id=self.id)
        if self.max is not None and len(value) > self.max:
            raise InvalidAnswer(f"ask {self.id!r}: select at most {self.max}, got {len(value)}", ask_id=self.id)
        return list(value)

    def to_dict(self) -> dict[str, Any]:
        return {**_ask_head(self), "options": _options_to_list(self), "min": self.min, "max": self.max}

    def offered(self) -> tuple[tuple[str | None, Grant], ...]:
        return _option_grants(self, None)

    def triggered(self, value: Any) -> tuple[tuple[str | None, Grant], ...]:
        return _option_grants(self, set(value) if isinstance(value, list | tuple) else set())

    def from_words(self, words: Sequence[str]) -> Any:
        options = options_of(self)
        picks: list[str] = []
        for word in map(str.strip, words):
            # A word that is one option (an id may hold a comma) is that option; any other
            # is split at its commas.
            picks += [word] if _match_option(options, word) else [p.strip() for p in word.split(",")]
        return [_match_option(options, p) or p for p in picks if p]

    def from_input(self, option_id: str | None, option_ids: Sequence[str] | None, text: str | None) -> Any:
        if text is not None:
            raise InvalidAnswer(f"question {self.id!r}: choose options with optionIds", ask_id=self.id)
        return list(option_ids) if option_ids is not None else [option_id]

    def from_fields(self, values: FieldValues, name: str) -> Any:
        return values.all(name)

    def inputs(self, name: str) -> tuple[FormInput, ...] | None:
        return None

    def answer_text(self, value: Any) -> str:
        labels = {o.id: o.label for o in options_of(self)}
        return ", ".join(labels.get(v, v) for v in value) or "none"

    def terminal_prompt(self, optional: str) -> tuple[list[str], str]:
        return _numbered(self, optional), "(numbers or names, separated by commas) > "

    def from_line(self, line: str) -> Any:
        return [_pick(options_of(self), part.strip()) for part in line.split(",") if part.strip()]

    def from_decision(self, word: str) -> Any:
        options = options_of(self)
        picked = _decided(options, word)
        if not picked and yes_no(word) is False:  # a refusal ticks none, where none may be
            if self.min:
                _refusal_picks_nothing(word)
            return []
        picked = picked or [opt.id for opt in options[: max(self.min, 1)]]
        return picked[: self.max] if self.max is not None else picked

    def plain(self) -> tuple[Any, ...] | None:
        return None

    def one_click_answers(self) -> tuple[tuple[str, Any], ...] | None:
        return None  # one click picks one option, and this ask takes a set of them

    def input_options(self) -> tuple[tuple[str, str], ...] | None:
        return _labelled(self)

    def as_verdict(self) -> Confirm | None:
        return None

    def edit_fields(self, name: str, arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
        return []

    def edited(self, name: str, values: FieldValues, original: FieldValues) -> bool:
        return True

    def how_to_answer(self) -> str:
        bounds = f"at least {self.min}" if self.min else ""
        if self.max is not None:
            bounds += f"{', ' if bounds else ''}at most {self.max}"
        options = options_of(self)
        ids = ", ".join(o.id for o in options)
        apart = "as separate words" if any("," in o.id for o in options) else "separated by commas"
        return f"some of {ids}, {apart}" + (f" ({bounds})" if bounds else "")


@dataclass(frozen=True, slots=True)
class Form:
    """A JSON object valid against `schema` (a JSON Schema of type object, draft 2020-12).

    An answer is held to the formats the schema names (`email`, `date`, `time`,
    `date-time`, `uri`, `ipv4`, `ipv6`, `uuid`, ...) from every surface, each as draft
    2020-12 means it. A field's `default` fills the web form's field; an answer that leaves
    the field out is kept without it (a person may clear it), so read it with
    `answers.get(name, default)`."""

    prompt: str
    schema: Mapping[str, Any] = field(default_factory=dict)
    id: str = "form"
    required: bool = True
    _validator: Any = field(init=False, repr=False, compare=False)

    type = "form"
    costly_to_check = True  # a schema's check can cost milliseconds a KiB: run off the event loop
    allow_other = False
    picks_several = False

    def __post_init__(self) -> None:
        _check_prompt(self.type, self.id, self.prompt)
        if not isinstance(self.schema, Mapping) or self.schema.get("type") != "object":
            raise InvalidRequest(f'ask {self.id!r}: a form schema must be a JSON Schema with "type": "object"')
        check_json(self.schema, f"ask {self.id!r}: the form schema")
        from ._form_schema import checked_validator

        object.__setattr__(self, "_validator", checked_validator(self.id, self.schema))

    @classmethod
    def _stored(cls, prompt: str, schema: Mapping[str, Any], id: str = "form", required: bool = True) -> Form:
        """A form as it was stored: checked when it was created, so not checked again
        (that costs far more than reading it)."""
        form = object.__new__(cls)
        for name, value in (("prompt", prompt), ("schema", schema), ("id", id), ("required", required)):
            object.__setattr__(form, name, value)
        from ._form_schema import form_validator

        object.__setattr__(form, "_validator", form_validator(schema))
        return form

    def errors(self, value: object) -> list[ValidationError]:
        """What is wrong with `value`, shallowest first. Patterns run on RE2 and the
        checks keep to the time budget of this thread (see `time_budget`)."""
        from ._form_schema import errors

        return errors(self.id, self._validator, value)

    def check(self, value: object) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise InvalidAnswer(f"ask {self.id!r}: expected an object, got {_kind_of(value)}", ask_id=self.id)
        error = next(iter(self.errors(value)), None)
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path)
            at = f" at {where!r}" if where else ""
            raise InvalidAnswer(f"ask {self.id!r}: {error.message}{at}", ask_id=self.id)
        return dict(value)

    def to_dict(self) -> dict[str, Any]:
        return {**_ask_head(self), "schema": dict(self.schema)}

    def offered(self) -> tuple[tuple[str | None, Grant], ...]:
        return ()

    def triggered(self, value: Any) -> tuple[tuple[str | None, Grant], ...]:
        return ()

    def from_words(self, words: Sequence[str]) -> Any:
        if words and not words[0].lstrip().startswith("{"):
            names = list(self.schema.get("properties", {}))
            example = "{" + ", ".join(f'"{n}": ...' for n in names[:4]) + (", ..." if len(names) > 4 else "") + "}"
            fault = f"ask {self.id!r} is a form: give its answer as one JSON object, with --json '{example}'"
            raise InvalidAnswer(fault, ask_id=self.id)
        try:
            return json.loads(" ".join(words))
        except (ValueError, RecursionError) as exc:  # not JSON; a number too long; nested too deep
            raise InvalidAnswer(f"ask {self.id!r}: give the form as JSON ({exc})", ask_id=self.id) from None

    def from_input(self, option_id: str | None, option_ids: Sequence[str] | None, text: str | None) -> Any:
        try:
            return json.loads(_text_input(self, text))
        except (ValueError, RecursionError):  # not JSON; a number too long; nested too deep
            fault = f"question {self.id!r}: give the form as a JSON object in text"
            raise InvalidAnswer(fault, ask_id=self.id) from None

    def from_fields(self, values: FieldValues, name: str) -> Any:
        return read_form(self, name, values)

    def inputs(self, name: str) -> tuple[FormInput, ...] | None:
        """An input per property of the schema, or None to take the whole answer as JSON."""
        return form_fields(self, name)

    def answer_text(self, value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    def terminal_prompt(self, optional: str) -> tuple[list[str], str]:
        required = set(self.schema.get("required", ()))
        lines = [self.prompt + optional]
        for name, prop in self.schema.get("properties", {}).items():
            about = (prop.get("description") or prop.get("type") or "") if isinstance(prop, Mapping) else ""
            allowed = _allowed_values(prop) if isinstance(prop, Mapping) else ""
            about = "; ".join(part for part in (str(about), allowed) if part)
            lines.append(f"  {name}{' (required)' if name in required else ''}{f': {about}' if about else ''}")
        return lines, "(a JSON object with those fields) > "

    def from_line(self, line: str) -> Any:
        try:
            return json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidAnswer(f"not JSON: {exc.msg}", ask_id=self.id) from None
        except (ValueError, RecursionError):  # a number too long; nested too deep
            raise InvalidAnswer(
                "JSON that cannot be read here (nested too deep, or a number too long)", ask_id=self.id
            ) from None

    def from_decision(self, word: str) -> Any:
        """The schema's defaults (None when it has none), checked."""
        properties = self.schema.get("properties", {})
        value = {
            name: prop["default"]
            for name, prop in properties.items()
            if isinstance(prop, Mapping) and "default" in prop
        }
        return self.check(value) if value or self.required else None

    def plain(self) -> tuple[Any, ...] | None:
        return None

    def one_click_answers(self) -> tuple[tuple[str, Any], ...] | None:
        return None

    def input_options(self) -> tuple[tuple[str, str], ...] | None:
        return None  # answered with its JSON object as text

    def as_verdict(self) -> Confirm | None:
        return None

    def edit_fields(self, name: str, arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
        """The posted fields that show `arguments` in this form's inputs: its properties are
        the arguments of the tool call under review, to be edited."""
        return form_values(self, name, arguments)

    def edited(self, name: str, values: FieldValues, original: FieldValues) -> bool:
        return not form_unchanged(self, name, values, original)

    def how_to_answer(self) -> str:
        return "a JSON object that fits its schema"


def options_of(ask: Choice | MultiChoice) -> tuple[Option, ...]:
    """The options of a choice ask, as the `Option`s they were normalised to."""
    return cast(tuple[Option, ...], ask.options)


def _match_option(options: Sequence[Option], word: str) -> str | None:
    """The id of the option whose id is `word`, else whose id or label is `word` ignoring case."""
    for option in options:
        if option.id == word:
            return option.id
    low = word.casefold()
    for option in options:
        if option.id.casefold() == low or option.label.casefold() == low:
            return option.id
    return None


def _numbered(ask: Choice | MultiChoice, optional: str) -> list[str]:
    lines = [ask.prompt + optional]
    for number, opt in enumerate(options_of(ask), 1):
        about = f" - {opt.description}" if opt.description else ""
        lines.append(f"  {number}) {opt.label}{about}")
    return lines


def _pick(options: tuple[Option, ...], text: str) -> str:
    """An option by its number (from 1), id or label, else the text as typed."""
    number = place_in(text, len(options) + 1)
    if number:  # (0 is no option's number)
        return options[number - 1].id
    wanted = text.casefold()
    matched = [opt.id for opt in options if wanted in (opt.id.casefold(), opt.label.casefold())]
    return matched[0] if matched else text


def _refusal_picks_nothing(word: str) -> None:
    """A refusing decision (`deny`, `no`, ...) that names no option picks none: it is no
    answer to a choice (a decision of `deny` had picked the first option, as if the person
    had chosen it)."""
    if yes_no(word) is False:
        raise InvalidAnswer(f"{word!r} refuses, and names none of the options")


def _decided(options: tuple[Option, ...], word: str) -> list[str]:
    """The options whose id or label is `word`, else those whose id or label is a yes/no
    word agreeing with it."""
    wanted = word.strip().casefold()
    picked = [opt.id for opt in options if wanted in (opt.id.casefold(), opt.label.casefold())]
    verdict = yes_no(word)
    if picked or verdict is None:
        return picked
    words = YES_WORDS if verdict else NO_WORDS
    return [opt.id for opt in options if opt.id.casefold() in words or opt.label.casefold() in words]


def _ask_head(ask: Ask) -> dict[str, Any]:
    return {"type": ask.type, "id": ask.id, "prompt": ask.prompt, "required": ask.required}


def _options_to_list(ask: Choice | MultiChoice) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for o in options_of(ask):
        item: dict[str, Any] = {"id": o.id, "label": o.label, "description": o.description}
        if o.grants:
            item["grants"] = [grant_to_dict(g) for g in _grants_of(o.grants)]
        out.append(item)
    return out


def _labelled(ask: Choice | MultiChoice) -> tuple[tuple[str, str], ...]:
    return tuple((o.id, o.label or o.id) for o in options_of(ask))


def _grants_of(grants: Sequence[Grant | Mapping[str, Any]]) -> tuple[Grant, ...]:
    """Grants as the `Grant`s they were normalised to."""
    return cast(tuple[Grant, ...], grants)


def _option_grants(ask: Choice | MultiChoice, picked: set[str] | None) -> tuple[tuple[str | None, Grant], ...]:
    """The grants of the options picked (of every option, for None), with the option's id."""
    return tuple((o.id, g) for o in options_of(ask) if picked is None or o.id in picked for g in _grants_of(o.grants))


def _text_input(ask: Ask, text: str | None) -> str:
    if text is None:
        raise InvalidAnswer(f"question {ask.id!r} takes text, not options", ask_id=ask.id)
    return text


Ask: TypeAlias = Text | Confirm | Choice | MultiChoice | Form
_ASK_CLASSES = (Text, Confirm, Choice, MultiChoice, Form)
ASK_TYPES: dict[str, type[Ask]] = {cls.type: cls for cls in _ASK_CLASSES}

_Entry = TypeVar("_Entry")


def by_ask_kind(entries: Mapping[type[Ask], _Entry], what: str) -> dict[type[Ask], _Entry]:
    """A surface's table from each ask kind to how it shows or reads that kind, checked to
    hold every kind and nothing else: a kind added without its entry fails where the table
    is made (when its module is imported), never silently skipped. `what` names the table
    in the error."""
    missing = [cls.__name__ for cls in _ASK_CLASSES if cls not in entries]
    strangers = [repr(key) for key in entries if key not in _ASK_CLASSES]
    if missing or strangers:
        faults = ([f"no entry for {', '.join(missing)}"] if missing else []) + (
            [f"{', '.join(strangers)} is not an ask kind"] if strangers else []
        )
        raise TypeError(f"{what}: {'; '.join(faults)}")
    return dict(entries)


def _kind_of(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", str: "text", int: "a number", float: "a number", list: "a list", dict: "an object"}.get(
        type(value), type(value).__name__
    )


# -- requests ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a request came from, so a notification knows whom to ask and why."""

    session: str | None = None
    channel: str | None = None
    agent: str | None = None
    actor: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    arguments: Mapping[str, Any] | None = None
    run: str | None = None
    correlation_id: str | None = None
    delegation: tuple[str, ...] | None = None
    """The agents that delegated down to `agent`, the root conversation's agent first."""
    channel_type: str | None = None
    """The kind of door the request came through, as the host names it (`text`,
    `realtime_voice`, `conference`, ...): hooks and notifications can adapt to it."""


NO_ORIGIN = Origin()
"""The origin of a request that says nothing of where it came from (shared: Origins are frozen)."""


@_quick_init
@dataclass(frozen=True, slots=True)
class Response:
    """How a request settled: the answers by ask id, who, through which surface, why, when.

    `cause` tells apart the ways a request is given up on (`cancelled`, `released`,
    `closed`, `withdrawn`); it is None for an answer, a rejection or an expiry.
    """

    at: datetime
    answers: Mapping[str, Any] = field(default_factory=dict)
    by: str | None = None
    via: str | None = None
    reason: str = ""
    cause: str | None = None
    grants: tuple[IssuedGrant, ...] = ()
    """The grants this answer issued (see `issue_grants`)."""

    _make: ClassVar[Callable[..., Response]]  # the fields in order, cheaper than __init__ (`_quick_init`)


@_quick_init
@dataclass(frozen=True, slots=True)
class Request:
    """A durable ask for human input. Build one through `Broker.create`."""

    id: str
    kind: Kind
    asks: tuple[Ask, ...]
    created_at: datetime
    status: Status = Status.PENDING
    title: str = ""
    details: str = ""
    context: Any = None
    to: str | None = None
    requester: str | None = None
    origin: Origin = NO_ORIGIN
    expires_at: datetime | None = None
    """When the request expires unless answered first; None once it has settled (then
    `response.at` says when), on every surface. Its `created` event still shows the
    request as made, deadline and all."""
    idempotency_key: str | None = None
    response: Response | None = None
    detached: bool = False
    """Created with `create_detached`: nobody waits on it, its creator frees it with `release`."""

    _make: ClassVar[Callable[..., Request]]  # the fields in order, cheaper than __init__ (`_quick_init`)

    @property
    def answer(self) -> Any:
        """The answer: the bare value for a single ask, else a dict by ask id; None if unanswered."""
        if self.status is not Status.ANSWERED or self.response is None:
            return None
        if len(self.asks) == 1:
            return self.response.answers.get(self.asks[0].id)
        return dict(self.response.answers)

    @property
    def outlives_its_waiter(self) -> bool:
        """Whether the request stays pending when the call waiting on it is cancelled
        (Ctrl-C, a cancelled task, a client hanging up): one created detached (its creator
        owns it), one made with an idempotency key (its maker comes back for it with the
        same key) or one belonging to a run (the run's, not the waiting process's). Any
        other request is withdrawn with its cancelled waiting call. A process that ends
        without unwinding (SIGTERM by default, a crash) withdraws nothing either way."""
        return self.detached or self.idempotency_key is not None or self.origin.run is not None

    def as_created(self, expires_at: datetime | None = None) -> Request:
        """This request as it was when created: pending, without a response. A settled
        request no longer carries its deadline: `expires_at` gives it back (a store has it
        from the request as made)."""
        return self._with(Status.PENDING, None, self.expires_at if expires_at is None else expires_at)

    def settle(self, status: Status, response: Response | None) -> Request:
        """This request as settled, its `expires_at` cleared (a settled request expires no
        more); the caller stores it only if still pending."""
        return self._with(status, response, self.expires_at if status is Status.PENDING else None)

    def _with(self, status: Status, response: Response | None, expires_at: datetime | None) -> Request:
        return Request._make(
            self.id,
            self.kind,
            self.asks,
            self.created_at,
            status,
            self.title,
            self.details,
            self.context,
            self.to,
            self.requester,
            self.origin,
            expires_at,
            self.idempotency_key,
            response,
            self.detached,
        )


@_quick_init
@dataclass(frozen=True, slots=True)
class Event:
    """One record of the append-only, totally ordered event log."""

    id: int
    type: str
    at: datetime
    request_id: str | None = None
    request: Request | None = None
    """The request as it was right after this event."""
    data: Mapping[str, Any] = field(default_factory=dict)

    _make: ClassVar[Callable[..., Event]]  # the fields in order, cheaper than __init__ (`_quick_init`)


@dataclass(frozen=True, slots=True)
class Claim:
    """A member of a team has taken a request to that team: who, and since when. Others
    see it; it does not stop them from answering (the first answer wins as always)."""

    request_id: str
    by: str
    at: datetime


def claim_to_dict(claim: Claim) -> dict[str, Any]:
    return {"request_id": claim.request_id, "by": claim.by, "at": claim.at.isoformat()}


def claim_from_dict(data: Mapping[str, Any]) -> Claim:
    return Claim(str(data["request_id"]), str(data["by"]), datetime.fromisoformat(str(data["at"])))


@dataclass(frozen=True, slots=True)
class Deny:
    """Returned by an input hook to refuse a request; the request is rejected with `reason`."""

    reason: str = "denied"


InputHook: TypeAlias = Callable[[Request], Awaitable[Deny | None] | Deny | None]
"""An on-input-required hook, sync or async: notify someone; return `Deny(...)` to reject
the request."""


def _ask_sequence(asks: object) -> tuple[Ask, ...]:
    """The asks given as a sequence; what is no sequence of asks refused saying what to give
    (a bare prompt's text was taken letter by letter: "not an ask: 'S'")."""
    if isinstance(asks, str):
        raise InvalidRequest(
            f"asks: {asks[:60]!r} is text, not an ask: ask with one, such as Text({asks[:60]!r}) or "
            f"Confirm({asks[:60]!r}), or a list of them"
        )
    if isinstance(asks, Mapping):
        raise InvalidRequest("asks: a dict is not an ask: build one from its JSON shape with ask_from_dict(...)")
    if not isinstance(asks, Iterable) or isinstance(asks, bytes | bytearray):
        raise InvalidRequest(f"asks: {type(asks).__name__} is not an ask: give one, or a list of them")
    return tuple(asks)


def build_request(
    asks: Ask | Sequence[Ask],
    *,
    kind: str = "question",
    title: str = "",
    details: str = "",
    context: Any = None,
    to: str | None = None,
    requester: str | None = None,
    origin: Origin | None = None,
    expires_at: datetime | None = None,
    idempotency_key: str | None = None,
    max_prompt_length: int | None = None,
    limits: Limits = DEFAULT_LIMITS,
    now: datetime | None = None,
) -> Request:
    """Check the parts of a new request against `limits` and return it, pending, with a
    fresh id. `max_prompt_length`, when given, overrides that limit."""
    if max_prompt_length is not None:
        limits = replace(limits, max_prompt_length=max_prompt_length)
    max_prompt_length = limits.max_prompt_length
    if isinstance(asks, _ASK_CLASSES):
        ask_list: tuple[Ask, ...] = (asks,)
        if len(asks.prompt) > max_prompt_length:
            raise InvalidRequest(_too_long(asks, max_prompt_length))
    else:
        ask_list = _ask_sequence(asks)
        if not ask_list:
            raise InvalidRequest("a request needs at least one ask")
        seen: set[str] = set()
        for ask in ask_list:
            if not isinstance(ask, _ASK_CLASSES):
                raise InvalidRequest(f"not an ask: {ask!r}")
            if ask.id in seen:
                raise InvalidRequest(f"ask id {ask.id!r} is used twice")
            seen.add(ask.id)
            if len(ask.prompt) > max_prompt_length:
                raise InvalidRequest(_too_long(ask, max_prompt_length))
    if kind != "question" and kind != "approval":
        raise InvalidRequest(f"kind must be 'question' or 'approval', not {kind!r}")
    if not isinstance(title, str):
        raise InvalidRequest("title must be a string")
    if not isinstance(details, str):
        raise InvalidRequest("details must be a string")
    if idempotency_key is not None and (not isinstance(idempotency_key, str) or not idempotency_key):
        raise InvalidRequest("idempotency_key must be a non-empty string")
    if expires_at is not None:
        if expires_at.tzinfo is None or expires_at.utcoffset() is None:
            raise InvalidRequest("expires_at must be timezone-aware")
        try:  # in UTC, as every store keeps it (PostgreSQL refused such a time with its own error)
            expires_at.astimezone(UTC)
        except OverflowError:
            raise InvalidRequest(
                f"expires_at {expires_at.isoformat()} is outside the years 1 to 9999 in UTC, which no store keeps"
            ) from None
    _check_request_limits(ask_list, title, details, context, to, requester, origin, idempotency_key, limits)
    return Request._make(
        new_id(),
        kind,
        ask_list,
        now or datetime.now(UTC),
        Status.PENDING,
        title,
        details,
        context,
        to,
        requester,
        origin or NO_ORIGIN,
        expires_at,
        idempotency_key,
    )


_SPACED = re.compile(r"\s|[\x00-\x1f\x7f]")
"""What no name of a person or team holds: white space, control characters (said as white
space). An agent's name (a request's requester) may: it names the agent, who reads nothing."""


def _check_request_limits(
    asks: tuple[Ask, ...],
    title: str,
    details: str,
    context: Any,
    to: str | None,
    requester: str | None,
    origin: Origin | None,
    idempotency_key: str | None,
    limits: Limits,
) -> None:
    if len(asks) > limits.max_asks:
        raise InvalidRequest(f"asks: {len(asks)} asks, at most {limits.max_asks} allowed")
    if title:
        check_text(title, "title", limits.max_title_length)
    if details:
        check_text(details, "details", limits.max_details_length)
    if to is not None or requester is not None or idempotency_key is not None:
        for name, value in (("to", to), ("requester", requester), ("idempotency_key", idempotency_key)):
            check_text(value, name, limits.max_name_length)
        if to is not None and (not to or _SPACED.search(to)):  # an inbox nobody reads: nobody would answer
            why = "is empty" if not to else "holds white space"
            raise InvalidRequest(f"to: {to!r} {why}, which no name of a person or team does")
    if context is not None:
        check_json(context, "context", limits.max_context_bytes)
    if origin is not None:
        for name in Origin.__dataclass_fields__:
            value = getattr(origin, name)
            if isinstance(value, str):
                check_text(value, f"origin.{name}", limits.max_name_length)
        check_json(origin_to_dict(origin), "origin", limits.max_origin_bytes)
    for ask in asks:
        check_ask(ask, limits)


def check_ask(ask: Ask, limits: Limits = DEFAULT_LIMITS) -> None:
    """Check one ask against `limits`, and that each of its strings can be stored."""
    ask_id = ask.id
    if not (
        type(ask_id) is str and len(ask_id) <= limits.max_name_length and ask_id.isascii() and "\x00" not in ask_id
    ):
        check_text(ask_id, "an ask id", limits.max_name_length)
    prompt = ask.prompt
    if not (
        type(prompt) is str and len(prompt) <= limits.max_prompt_length and prompt.isascii() and "\x00" not in prompt
    ):
        check_text(prompt, f"ask {ask.id!r}: the prompt", limits.max_prompt_length)
    if type(ask) is Text:
        return  # nothing more to check: no options, no schema, no grants offered
    where = f"ask {ask.id!r}"
    if isinstance(ask, Choice | MultiChoice):
        options = options_of(ask)
        if len(options) > limits.max_options:
            raise InvalidRequest(f"{where}: {len(options)} options, at most {limits.max_options} allowed")
        for opt in options:
            check_text(opt.id, f"{where}: an option id", limits.max_name_length)
            check_text(opt.label, f"{where}: option {opt.id!r}'s label", limits.max_prompt_length)
            check_text(opt.description, f"{where}: option {opt.id!r}'s description", limits.max_prompt_length)
    elif isinstance(ask, Form):
        check_json(ask.schema, f"{where}: the form schema", limits.max_schema_bytes)
    offered = ask.offered()
    if len(offered) > limits.max_options:
        raise InvalidRequest(f"{where}: {len(offered)} grants offered, at most {limits.max_options} allowed")
    for option, grant in offered:
        at = f"{where}: option {option!r}'s grant" if option is not None else f"{where}: a grant"
        check_text(grant.with_, f"{at} `with`", limits.max_prompt_length)
        check_text(grant.can, f"{at} `can`", limits.max_prompt_length)


def _too_long(ask: Ask, limit: int) -> str:
    return f"ask {ask.id!r}: the prompt is {len(ask.prompt)} characters, at most {limit} allowed"


class Answers(dict[str, Any]):
    """Answers by ask id, said explicitly: never read as the bare value of a single ask."""


def decision_ask(request: Request) -> Confirm | None:
    """The yes/no ask an approval is decided by, or None when `request` is not one.

    An approval is decided by its first ask when that is a confirm and every other ask is
    optional (the gate's "edit the arguments" form): approve / deny answers that ask alone,
    from any surface, and the optional ones may be left out.
    """
    verdict = request.asks[0].as_verdict() if request.kind == "approval" and request.asks else None
    if verdict is None or any(ask.required for ask in request.asks[1:]):
        return None
    return verdict


def check_answers(request: Request, answer: Any, *, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Check an answer against the request's asks and return the answers by ask id.

    A mapping keyed by ask ids answers several asks; a request with one ask may also be
    answered with the bare value (None leaves it unanswered, if it is optional), and so may
    an approval decided by its first ask, a confirm, whose other asks are optional (the
    gate's edits). For a single form ask, a mapping is the bare form value unless its only
    key is the ask id (and that is not a property of the form).
    Form checks keep to the thread's `time_budget`, when one is set.
    """
    asks = request.asks
    check_json(answer, "the answer", limits.max_answer_bytes, error=InvalidAnswer)
    if len(asks) == 1 and not isinstance(answer, Answers) and not _is_keyed(asks[0], answer):
        if answer is None and not asks[0].required:
            return {}  # the one ask, optional, left unanswered
        return {asks[0].id: asks[0].check(answer)}
    if not isinstance(answer, Mapping):
        verdict = decision_ask(request)
        if verdict is not None:
            return {verdict.id: verdict.check(answer)}  # an approval's yes or no alone, its edits left out
        raise InvalidAnswer(f"expected an object of answers by ask id ({', '.join(a.id for a in asks)})")
    by_id = {ask.id: ask for ask in asks}
    unknown = [key for key in answer if key not in by_id]
    if unknown:
        asked = ", ".join(repr(a.id) for a in asks)
        if unknown[0] == "arguments" and decision_ask(request) is not None:  # the gate's edit, not offered here
            raise InvalidAnswer(
                f"this approval offers no edit of the arguments (its tool gave no argument schema): answer "
                f"{asked} alone, yes or no",
                ask_id="arguments",
            )
        raise InvalidAnswer(f"unknown ask id {unknown[0]!r}: the request asks {asked}", ask_id=str(unknown[0]))
    checked: dict[str, Any] = {}
    for ask in asks:
        if ask.id in answer:
            checked[ask.id] = ask.check(answer[ask.id])
        elif ask.required:
            raise InvalidAnswer(f"ask {ask.id!r}: an answer is required", ask_id=ask.id)
    return checked


def _is_keyed(ask: Ask, answer: Any) -> bool:
    """Whether a mapping answering a one-ask request gives its answers by ask id: keyed by
    the ask's id alone, or, for an ask whose value is never a mapping (all but a form),
    naming its id at all (`{"approve": true, "arguments": ...}` for an approval that
    offers no edit is then refused for its unknown ask, not read as the confirm's value)."""
    if type(answer) is str or not isinstance(answer, Mapping) or ask.id not in answer:
        return False
    if isinstance(ask, Form):
        return set(answer) == {ask.id} and ask.id not in ask.schema.get("properties", {})
    return True


# -- JSON shape --------------------------------------------------------------------------


def ask_to_dict(ask: Ask) -> dict[str, Any]:
    """The ask's JSON shape (each ask type gives its own, `to_dict`)."""
    return ask.to_dict()


def ask_from_dict(data: Mapping[str, Any], *, limits: Limits | None = None, stored: bool = False) -> Ask:
    """Build an ask from its JSON shape; unknown types or fields raise `InvalidRequest`.

    With `limits`, a form schema over its size limit is refused before it is checked (a
    check costs far more than the size). `stored` rebuilds an ask that was checked when
    it was created, without checking its schema again.
    """
    if not isinstance(data, Mapping):
        raise InvalidRequest("an ask must be an object")
    fields = dict(data)
    type_name = fields.pop("type", None)
    cls = ASK_TYPES.get(type_name) if isinstance(type_name, str) else None
    if cls is None:
        raise InvalidRequest(f"unknown ask type {type_name!r}; expected one of {', '.join(ASK_TYPES)}")
    allowed = {f for f in cls.__dataclass_fields__ if not f.startswith("_")}
    unknown = set(fields) - allowed
    if "options" in unknown:
        raise InvalidRequest(f"ask {fields.get('id', type_name)!r}: options are only allowed on choice asks")
    if "grants" in unknown:
        raise InvalidRequest(
            f"ask {fields.get('id', type_name)!r}: grants may be offered only on confirm (approval) asks and on the "
            f"options of choice and multi-choice asks, not on a {type_name} ask"
        )
    if unknown:
        raise InvalidRequest(f"ask {fields.get('id', type_name)!r}: unknown field(s) {sorted(unknown)}")
    if cls is Form:
        schema = fields.get("schema")
        if stored and isinstance(schema, Mapping):
            return Form._stored(**fields)
        if limits is not None and isinstance(schema, Mapping):
            check_json(schema, f"ask {fields.get('id', 'form')!r}: the form schema", limits.max_schema_bytes)
    try:
        return cls(**fields)
    except TypeError as exc:
        raise InvalidRequest(f"ask {fields.get('id', type_name)!r}: {exc}") from None


def _ts(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


def origin_to_dict(origin: Origin) -> dict[str, Any]:
    if origin is NO_ORIGIN:
        return {}  # most requests: nothing to look at
    out = {name: value for name in Origin.__dataclass_fields__ if (value := getattr(origin, name)) is not None}
    if origin.delegation is not None:
        out["delegation"] = list(origin.delegation)
    return out


def origin_from_dict(data: Mapping[str, Any]) -> Origin:
    if not data:
        return NO_ORIGIN
    fields = dict(data)
    if fields.get("delegation") is not None:
        fields["delegation"] = tuple(fields["delegation"])
    return Origin(**fields)


def response_to_dict(response: Response) -> dict[str, Any]:
    return {
        "answers": dict(response.answers),
        "by": response.by,
        "via": response.via,
        "reason": response.reason,
        "cause": response.cause,
        "at": response.at.isoformat(),
        **({"grants": [grant_record(g) for g in response.grants]} if response.grants else {}),
    }


def response_from_dict(data: Mapping[str, Any]) -> Response:
    return Response(
        at=datetime.fromisoformat(data["at"]),
        answers=data.get("answers") or {},
        by=data.get("by"),
        via=data.get("via"),
        reason=data.get("reason") or "",
        cause=data.get("cause"),
        grants=tuple(issued_grant_from_dict(g) for g in data.get("grants") or ()),
    )


def request_to_dict(request: Request) -> dict[str, Any]:
    """The request's JSON shape. `expires_at` is shown only while the request is pending
    (the time it will be given up); once settled it is null and `settled_at` says when."""
    settled = request.status is not Status.PENDING
    return {
        "id": request.id,
        "kind": request.kind,
        "status": request.status.value,
        "asks": [ask_to_dict(a) for a in request.asks],
        "title": request.title,
        "details": request.details,
        "context": request.context,
        "to": request.to,
        "requester": request.requester,
        "origin": origin_to_dict(request.origin),
        "created_at": request.created_at.isoformat(),
        "expires_at": None if settled else _ts(request.expires_at),
        "settled_at": request.response.at.isoformat() if settled and request.response else None,
        "idempotency_key": request.idempotency_key,
        "response": response_to_dict(request.response) if request.response else None,
        "detached": request.detached,
    }


def request_from_dict(data: Mapping[str, Any]) -> Request:
    """Rebuild a stored request. Stored data was checked on the way in."""
    return Request(
        id=data["id"],
        kind=data["kind"],
        status=Status(data["status"]),
        asks=tuple(ask_from_dict(a, stored=True) for a in data["asks"]),
        title=data.get("title", ""),
        details=data.get("details", ""),
        context=data.get("context"),
        to=data.get("to"),
        requester=data.get("requester"),
        origin=origin_from_dict(data.get("origin", {})),
        created_at=datetime.fromisoformat(data["created_at"]),
        expires_at=_dt(data.get("expires_at")),
        idempotency_key=data.get("idempotency_key"),
        response=response_from_dict(data["response"]) if data.get("response") else None,
        detached=bool(data.get("detached", False)),
    )


# -- runs --------------------------------------------------------------------------------


class RunStatus(enum.StrEnum):
    """Where a run is: working, parked on a person, or ended (the last three)."""

    RUNNING = "running"
    WAITING_FOR_INPUT = "waiting_for_input"
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def waiting(self) -> bool:
        return self in (RunStatus.WAITING_FOR_INPUT, RunStatus.WAITING_FOR_APPROVAL)

    @property
    def ended(self) -> bool:
        return self in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


DEFAULT_PAUSE_TIMEOUT = timedelta(days=14)
"""How long a parked run waits on a person before it is given up as abandoned (unless its
`max_duration` is longer): generous, so "approve it tomorrow" is never affected."""

MAX_STATE_BYTES = 16 * 1024 * 1024
"""How large a run's framework state may be, as compact JSON."""


@_quick_init
@dataclass(frozen=True, slots=True)
class Run:
    """A durable record of one agent's piece of work, which may pause on people.

    `state` is the framework's own state (a message history, a serialized `RunState`, a
    checkpoint reference): JSON, opaque to interlock, kept server-side and never taken
    from a person's client. `waiting_on` are the requests a parked run waits on; once
    every one has settled the run is `ready` and one worker claims it (`worker`, until
    `lease_expires_at`). `expires_at` is when a parked run is given up (its pause ran
    out), or a run running in its agent's own process is (that process gave no sign of
    life): see `deadline`.
    """

    id: str
    agent: str
    created_at: datetime
    updated_at: datetime
    status: RunStatus = RunStatus.RUNNING
    session: str | None = None
    requester: str | None = None
    terminal_reason: str | None = None
    """Why it ended: "interaction_timeout" (its pause ran out), "abandoned" (running in its
    agent's own process, which neither parked it, started it again nor asked on it in time),
    "cancelled_by_user" or the reason a cancel gave, "error" (failed)."""
    expires_at: datetime | None = None
    max_duration: timedelta | None = None
    waiting_on: tuple[str, ...] = ()
    state: Any = None
    result: Any = None
    error: str | None = None
    ready: bool = False
    worker: str | None = None
    lease_expires_at: datetime | None = None
    attempts: int = 0
    """How many times a worker has claimed the run."""

    @property
    def deadline(self) -> datetime | None:
        """When the run is given up unless something happens first (its `expires_at`): a
        pause still waiting on a person (not ready) ends `cancelled`, `interaction_timeout`,
        unless answered first; a run `running` in its agent's own process (no worker holds
        it) ends `cancelled`, `abandoned`, unless that process parks it, starts it again,
        makes a request on it or waits on one first (a wait moves it on while it lasts).
        None for any other run (ready, held by a worker, ended)."""
        if self.status is RunStatus.RUNNING:
            return self.expires_at if self.worker is None else None
        return self.expires_at if self.status.waiting and not self.ready else None

    def park_deadline(self, now: datetime, pause_timeout: timedelta) -> datetime:
        """When a pause begun `now` is given up: `pause_timeout` later, or `max_duration`
        later when that is longer."""
        return park_deadline(now, pause_timeout, self.max_duration)


def park_deadline(now: datetime, pause_timeout: timedelta, max_duration: timedelta | None) -> datetime:
    """When a pause begun `now` is given up: `pause_timeout` later, or the run's
    `max_duration` later when that is longer."""
    window = pause_timeout if max_duration is None else max(pause_timeout, max_duration)
    try:
        return now + window
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC)


RUN_EVENTS: frozenset[str] = frozenset(
    {"run_started", "input_requested", "run_claimed", "run_completed", "run_failed", "run_cancelled"}
)
"""The event types about a run (its `data` carries the run's public fields, never its state)."""


def run_to_dict(run: Run, *, state: bool = True) -> dict[str, Any]:
    """The run's JSON shape. `state=False` leaves the framework state out: what a person's
    client is shown."""
    out: dict[str, Any] = {
        "id": run.id,
        "agent": run.agent,
        "session": run.session,
        "requester": run.requester,
        "status": run.status.value,
        "terminal_reason": run.terminal_reason,
        "created_at": run.created_at.isoformat(),
        "updated_at": run.updated_at.isoformat(),
        "expires_at": _ts(run.expires_at),
        "max_duration": run.max_duration.total_seconds() if run.max_duration is not None else None,
        "waiting_on": list(run.waiting_on),
        "ready": run.ready,
        "result": run.result,
        "error": run.error,
        "worker": run.worker,
        "lease_expires_at": _ts(run.lease_expires_at),
        "attempts": run.attempts,
    }
    if state:
        out["state"] = run.state
    return out


def run_from_dict(data: Mapping[str, Any]) -> Run:
    """Rebuild a stored run."""
    max_duration = data.get("max_duration")
    return Run(
        id=data["id"],
        agent=data["agent"],
        created_at=datetime.fromisoformat(data["created_at"]),
        updated_at=datetime.fromisoformat(data["updated_at"]),
        status=RunStatus(data["status"]),
        session=data.get("session"),
        requester=data.get("requester"),
        terminal_reason=data.get("terminal_reason"),
        expires_at=_dt(data.get("expires_at")),
        max_duration=timedelta(seconds=max_duration) if max_duration is not None else None,
        waiting_on=tuple(data.get("waiting_on") or ()),
        state=data.get("state"),
        result=data.get("result"),
        error=data.get("error"),
        ready=bool(data.get("ready")),
        worker=data.get("worker"),
        lease_expires_at=_dt(data.get("lease_expires_at")),
        attempts=int(data.get("attempts") or 0),
    )


def run_event_data(run: Run) -> dict[str, Any]:
    """The data of an event about `run`: its public fields, never its state, nor its result
    (read the run for that). `by` is its requester, so the event log files the event
    under the run and its requester. (The PostgreSQL store builds the same shape in SQL,
    `interlock_run_data`; the store suite checks they agree.)"""
    return {
        "run": run.id,
        "agent": run.agent,
        "session": run.session,
        "by": run.requester,
        "status": run.status.value,
        "terminal_reason": run.terminal_reason,
        "waiting_on": list(run.waiting_on),
        "ready": run.ready,
        "worker": run.worker,
        "attempts": run.attempts,
        "error": run.error,
    }
