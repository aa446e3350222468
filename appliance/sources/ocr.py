"""Text for scanned PDF pages, by the ``tesseract`` program where it is installed.

A page with no text layer but with images is a scan. Where ``tesseract`` is on the PATH
(Debian: ``apt install tesseract-ocr``, plus ``tesseract-ocr-LANG`` for more languages), each
image of such a page is read by it, one page at a time, and the page is cited as OCR text
(``scan.pdf, p. 3 (OCR)``). Without it the page is a counted, named skip. Nothing here calls a
network service or downloads anything: tesseract reads its installed language data only.

The languages come from ``[corpus] ocr_languages`` (tesseract's ``-l``, such as ``eng+deu``);
the corpus sets them for the files it reads with ``languages()``.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
from contextvars import ContextVar
from typing import Iterator, Optional

# Seconds one image may take; a page that takes longer is skipped, named.
OCR_TIMEOUT_S = 180.0
_LANGUAGES: ContextVar[str] = ContextVar("ocr_languages", default="eng")
# False ([corpus] ocr = false) switches OCR off: scanned pages are skipped as without tesseract.
_ENABLED: ContextVar[bool] = ContextVar("ocr_enabled", default=True)


class OcrFailed(Exception):
    """One image could not be read by tesseract; the message is the reason, one line."""


@contextlib.contextmanager
def languages(value: str, enabled: bool = True) -> Iterator[None]:
    """Read scanned pages in these tesseract languages (``eng``, ``eng+deu``) inside the block."""
    tokens = _LANGUAGES.set(value.strip() or "eng"), _ENABLED.set(enabled)
    try:
        yield
    finally:
        _LANGUAGES.reset(tokens[0])
        _ENABLED.reset(tokens[1])


def program() -> Optional[str]:
    """The tesseract executable, or None when OCR is not available (or switched off)."""
    if not _ENABLED.get():
        return None
    return shutil.which("tesseract")


def missing_hint() -> str:
    """What a user reads when a scanned page was skipped."""
    if not _ENABLED.get():
        return "OCR is off: set [corpus] ocr = true to read scans"
    return "install tesseract-ocr to read scans by OCR, then add the file again"


def describe() -> tuple[bool, str]:
    """For `doctor`: whether OCR can read scans in the configured languages, and one line
    naming the OCR program, its version and installed languages (or what to install)."""
    exe = program()
    if exe is None:
        return False, missing_hint()
    try:
        done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30, check=False)
        version = (done.stdout or done.stderr).splitlines()[0].strip()
        listed = subprocess.run([exe, "--list-langs"], capture_output=True, text=True, timeout=30, check=False)
        langs = [line.strip() for line in listed.stdout.splitlines()[1:] if line.strip() and line.strip() != "osd"]
    except (OSError, subprocess.SubprocessError, IndexError):
        return False, f"{exe} does not run (reinstall tesseract-ocr)"
    wanted = [lang for lang in _LANGUAGES.get().split("+") if lang]
    absent = [lang for lang in wanted if lang not in langs]
    line = f"{version}, languages {', '.join(langs) or 'none'}"
    if absent:
        line += f"; configured {'+'.join(wanted)} but {', '.join(absent)} not installed (apt install " \
                f"{' '.join('tesseract-ocr-' + a for a in absent)})"
    return not absent, line


def read_image(exe: str, image) -> str:
    """The text tesseract reads in one PIL image (raises OcrFailed with a one-line reason)."""
    buffer = io.BytesIO()
    try:
        picture = image.convert("L") if image.mode not in ("1", "L", "RGB") else image
        picture.save(buffer, format="PNG")
    except (OSError, ValueError) as exc:
        raise OcrFailed(f"image not readable ({type(exc).__name__})") from exc
    # One thread per tesseract: the corpus reads one page at a time and the machine's other
    # cores embed; OpenMP spinning on every core only slows both.
    env = dict(os.environ, OMP_THREAD_LIMIT="1")
    try:
        done = subprocess.run([exe, "stdin", "stdout", "-l", _LANGUAGES.get()], input=buffer.getvalue(),
                              capture_output=True, timeout=OCR_TIMEOUT_S, check=False, env=env)
    except subprocess.TimeoutExpired as exc:
        raise OcrFailed(f"OCR took longer than {OCR_TIMEOUT_S:.0f} s") from exc
    except OSError as exc:
        raise OcrFailed(f"tesseract does not run ({exc.strerror or type(exc).__name__})") from exc
    if done.returncode != 0:
        message = next((line for line in done.stderr.decode("utf-8", "replace").splitlines()
                        if line.strip()), f"exit code {done.returncode}")
        raise OcrFailed(f"tesseract failed ({message.strip()[:200]})")
    return done.stdout.decode("utf-8", "replace")
