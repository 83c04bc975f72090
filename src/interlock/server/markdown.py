"""A request's `details` as HTML: Markdown rendered by markdown-it-py, then sanitized by nh3.

Two layers, so neither alone decides what reaches the page: the renderer is told to pass no
raw HTML (it escapes it as text) and to keep to CommonMark plus tables and strikethrough;
the sanitizer then keeps only the tags Markdown itself makes, links only to http(s) and
mailto addresses (opened with rel="noopener noreferrer nofollow"), and no images (the
page's Content-Security-Policy would block a remote one anyway; an alt text is no loss).
"""

from __future__ import annotations

import nh3
from markdown_it import MarkdownIt
from markupsafe import Markup

__all__ = ["render_markdown"]

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


def render_markdown(text: str, top: int = 1) -> Markup:
    """Safe HTML for `text` written in Markdown, its headings moved down so that its `#`
    is an `h{top}` (none below h6): details sit under the page's own headings."""
    tokens = _renderer.parse(text[:_MAX_SOURCE])
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(int(token.tag[1]) + top - 1, 6)}"
    html = _renderer.renderer.render(tokens, _renderer.options, {})
    clean = nh3.clean(
        html,
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        url_schemes=_SCHEMES,
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )
    return Markup(clean)
