"""A request's `details` as HTML: Markdown rendered by markdown-it-py, then sanitized by nh3.

Two layers, so neither alone decides what reaches the page: the renderer is told to pass no
raw HTML (it escapes it as text) and to keep to CommonMark plus tables and strikethrough;
the sanitizer then keeps only the tags Markdown itself makes, links only to http(s) and
mailto addresses (opened with rel="noopener noreferrer nofollow"), and no images (the
page's Content-Security-Policy would block a remote one anyway; an alt text is no loss).

Rendering is slow next to everything else a page does: about 1.3 ms per KiB of ordinary
Markdown and up to 24 ms per KiB of brackets and asterisks (`[*[*[*...`), so the inbox's 50
pending requests with 100,000 characters of details each once held the event loop, and so
every other user of the server, for 97 s. A page's routes therefore render the details they
show beforehand with `prerender`, in a worker thread of their own, within a time budget
(what is left past it is shown as plain text this time), and keep what they made in a
cache bounded by size, so showing the same details again costs nothing.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

import nh3
from markdown_it import MarkdownIt
from markupsafe import Markup, escape

__all__ = ["CACHE_CHARS", "PRERENDER_SECONDS", "prerender", "render_markdown", "shift_headings"]

_TAGS = {
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "s", "code", "pre",
    "blockquote", "ul", "ol", "li", "a", "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}}  # no style: the CSP forbids inline styles
_SCHEMES = {"http", "https", "mailto"}
_MAX_SOURCE = 100_000  # characters rendered; the rest is cut (details are limited far below this)

_renderer = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable(
    ["table", "strikethrough"]
)


PRERENDER_SECONDS = 1.0
"""How long one `prerender` renders before it shows the rest of its texts as plain text."""

CACHE_CHARS = 16_000_000
"""How much rendered Markdown is kept (the characters of the texts and their HTML)."""

_cache: OrderedDict[str, Markup] = OrderedDict()  # touched on the event loop only
_cached = 0
_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="interlock-markdown")


def render_markdown(text: str, top: int = 1) -> Markup:
    """Safe HTML for `text` written in Markdown (kept from an earlier rendering, if any),
    its headings moved down so that its `#` is an `h{top}` (`shift_headings`)."""
    found = _cache.get(text)
    if found is not None:
        _cache.move_to_end(text)
        return shift_headings(found, top)
    return shift_headings(_render(text), top)


_HEADING = re.compile(r"<(/?)h([1-6])>")  # as the sanitizer leaves them: no attributes


def shift_headings(html: Markup, top: int) -> Markup:
    """`html` made here with its headings moved down so that a `#` is an `h{top}` (none
    below h6): details sit under the page's own headings. Their text is escaped, so every
    `<hN>` in it is a heading's own tag."""
    if top <= 1:
        return html
    return Markup(_HEADING.sub(lambda m: f"<{m[1]}h{min(int(m[2]) + top - 1, 6)}>", html))


async def prerender(texts: Iterable[str]) -> Mapping[str, Markup]:
    """The HTML of each of `texts`, made in a worker thread rather than on the event loop,
    for a page to show: rendered within `PRERENDER_SECONDS` (one text at least), the rest
    escaped as plain text, and what was rendered kept for the next page."""
    made: dict[str, Markup] = {}
    todo = []
    for text in dict.fromkeys(texts):
        if text:
            found = _cache.get(text)
            if found is None:
                todo.append(text)
            else:
                made[text] = found
    if todo:
        rendered = await asyncio.get_running_loop().run_in_executor(_worker, _render_within, todo)
        for text, html in rendered.items():
            _keep(text, html)
            made[text] = html
        for text in todo[len(rendered) :]:
            made[text] = Markup(f"<pre>{escape(text)}</pre>")
    return made


def _render_within(texts: list[str]) -> dict[str, Markup]:
    deadline = time.monotonic() + PRERENDER_SECONDS
    done: dict[str, Markup] = {}
    for text in texts:
        if done and time.monotonic() > deadline:
            break
        done[text] = _render(text)
    return done


def _keep(text: str, html: Markup) -> None:
    global _cached
    size = len(text) + len(html)
    if text in _cache or size > CACHE_CHARS:
        return
    _cache[text] = html
    _cached += size
    while _cached > CACHE_CHARS:
        old, old_html = _cache.popitem(last=False)
        _cached -= len(old) + len(old_html)


def _render(text: str) -> Markup:
    html = _renderer.render(text[:_MAX_SOURCE])
    clean = nh3.clean(
        html,
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        url_schemes=_SCHEMES,
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )
    return Markup(clean)
