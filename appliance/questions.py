"""Questions as the appliance takes them: cleaned of control characters, bounded in length,
and named by a file-name-safe slug with the question's own hash (run folders, report files)."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import unicodedata

from .errors import UsageError

MAX_QUESTION_CHARS = 2000


def clean_question(question: str) -> str:
    """The question with control characters removed and spaces folded; a UsageError if unusable."""
    text = "".join(ch if unicodedata.category(ch)[0] != "C" or ch in "\t\n" else " " for ch in question)
    text = " ".join(text.split())
    if not text:
        raise UsageError("the question is empty", hint='ask something, e.g. appliance research "Who ...?"')
    if len(text) > MAX_QUESTION_CHARS:
        raise UsageError(f"the question is {len(text)} characters long; the limit is {MAX_QUESTION_CHARS}",
                         hint="shorten it to the question itself and put background in a corpus")
    return text


def slugify(text: str, limit: int = 48) -> str:
    """A file-name-safe slug on any filesystem, plus a short hash so distinct questions never collide."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    words = re.sub(r"[^a-z0-9]+", "-", ascii_text).strip("-")
    words = words[:limit].rstrip("-") or "question"
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    return f"{words}-{digest}"


def today() -> dt.date:
    """The date a run started now is for: the one clock of research, batch, eval and the
    serve queue (a run's id and its prompts carry it, so a resumed run must be given the date
    it began). ``APPLIANCE_TODAY=YYYY-MM-DD`` pins it: an eval or batch run again on a later
    day then asks the same prompts and replays its cached calls, and a test of the real model
    does not change with the calendar."""
    return pinned_today(os.environ) or dt.date.today()


def pinned_today(env) -> dt.date | None:
    """The date ``APPLIANCE_TODAY`` in ``env`` pins, None when unset; a UsageError when it is no date."""
    pinned = env.get("APPLIANCE_TODAY", "").strip()
    if not pinned:
        return None
    try:
        return dt.date.fromisoformat(pinned)
    except ValueError:
        raise UsageError(f"APPLIANCE_TODAY is {pinned!r}, not a date",
                         hint="set it to a date such as 2026-01-31, or unset it for today") from None


# The profile a run id leaves unnamed: the packaged default.
DEFAULT_PROFILE = "standard"


def run_id_for(question: str, date: str, profile: str = DEFAULT_PROFILE) -> str:
    """``<date>-<slug>``, with ``-<profile>`` after it for any profile but the default: a quick
    run of a question never overwrites the standard run's report and run folder of the same
    day (each is resumed on its own)."""
    suffix = "" if not profile or profile == DEFAULT_PROFILE else f"-{profile}"
    return f"{date}-{slugify(question)}{suffix}"
