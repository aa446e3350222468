"""Turning downloaded bytes into text: trafilatura for HTML (main text, title, date), plain
text as it is. Shared by the fetcher and by corpus ingestion so both see pages alike."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

_CHARSET = re.compile(r"charset\s*=\s*[\"']?([\w.:-]+)", re.I)
# trafilatura's main-text extraction costs about 0.1 ms per tag, so a page of a few MB of tiny
# elements (tag soup, hostile or generated) would hold a run for a minute or more (48 s for
# 3 MB of <p>, measured). Past this many tags (a long encyclopedia article has fewer) the page
# gets the plain-text conversion, which is linear and ten times faster.
MAX_MAIN_TEXT_TAGS = 60_000
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)


@dataclass
class Extracted:
    """The readable part of a document."""

    title: str
    text: str
    published: Optional[str] = None


def decode_text(body: bytes, content_type: str = "") -> str:
    """Bytes to text: the declared charset, else UTF-8 (undecodable bytes replaced)."""
    match = _CHARSET.search(content_type or "")
    for encoding in ([match.group(1)] if match else []) + ["utf-8"]:
        try:
            return body.decode(encoding)
        except (LookupError, UnicodeDecodeError):
            continue
    return body.decode("utf-8", errors="replace")


def extract_html(html: bytes | str, url: str | None = None) -> Extracted:
    """Main text, title and publication date of an HTML page.

    trafilatura drops navigation and boilerplate; on pages where it finds no main text (a
    short page, a bare list) its plain-text conversion of the whole page is used instead,
    because some text beats none for a page a search engine thought relevant.
    """
    import trafilatura  # imported here: it is slow to import and only needed for pages

    if _tag_count(html) > MAX_MAIN_TEXT_TAGS:
        fields = {}
    else:
        fields = _as_dict(trafilatura.bare_extraction(html, url=url, with_metadata=True,
                                                      include_comments=False, include_tables=True,
                                                      deduplicate=False))
    text = (fields.get("text") or "").strip()
    if not text:
        text = (trafilatura.html2txt(html) or "").strip()
    title = (fields.get("title") or "").strip() or _fallback_title(html)
    published = fields.get("date") or None
    return Extracted(title=_squash(title), text=text, published=str(published) if published else None)


def _tag_count(html: bytes | str) -> int:
    if isinstance(html, bytes):
        return html.count(b"<")
    return html.count("<")


def _as_dict(doc) -> dict:
    # trafilatura 2 returns a Document object, 1.x a dict; accept both.
    if doc is None:
        return {}
    if isinstance(doc, dict):
        return doc
    if hasattr(doc, "as_dict"):
        return doc.as_dict()
    return {k: getattr(doc, k, None) for k in ("title", "text", "date")}


def _fallback_title(html: bytes | str) -> str:
    head = html[:20000]
    if isinstance(head, bytes):
        head = head.decode("utf-8", errors="replace")
    match = _TITLE.search(head)
    if not match:
        return ""
    import html as html_lib

    return html_lib.unescape(re.sub(r"<[^>]+>", "", match.group(1)))


def _squash(text: str) -> str:
    return " ".join(text.split())


def extract_plain(body: str) -> Extracted:
    """Plain text is used as it is; its first short line doubles as a title."""
    text = body.strip()
    first = text.split("\n", 1)[0].strip() if text else ""
    return Extracted(title=first if 0 < len(first) <= 120 else "", text=text)


def looks_like_html(body: bytes) -> bool:
    """Sniff a body that came without a usable content type."""
    head = body[:1024].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html", b"<head", b"<body")) or b"<html" in head
