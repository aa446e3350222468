"""Screenshots of each page of the web view for the README (docs/screenshots/*.png).

Starts a real `appliance serve` on loopback in a fresh state folder holding a three-document
corpus, submits one question on the page with the given model (the 135M test model by
default, which the machine can spare), and takes each page in Debian's chromium through
playwright (never a downloaded browser):

    python scripts/web_screenshots.py [--model smollm2-135m] [--out docs/screenshots] [--pages-only]
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

QUESTIONS = ["Who named Aurora Lake, and when?", "Where was Mira Holt born?"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", default=str(REPO / "docs" / "screenshots"))
    parser.add_argument("--pages-only", action="store_true",
                        help="only the pages that need no run (new research, corpora)")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("error: Debian's chromium is not installed (apt-get install -y chromium)", file=sys.stderr)
        return 2
    from playwright.sync_api import expect, sync_playwright

    from conftest import make_settings
    from serve_harness import Server, make_tiny_corpus

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        make_tiny_corpus(make_settings(home), Path(tmp) / "docs")
        server = Server(home).start()
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=chromium, headless=True)
                page = browser.new_page(viewport={"width": 1200, "height": 820}, device_scale_factor=1)

                def shot(name: str, full: bool = False) -> None:
                    page.screenshot(path=str(out / f"{name}.png"), full_page=full)
                    print(f"wrote {out / name}.png")

                def submit(question: str) -> str:
                    page.goto(f"{server.url}/")
                    page.fill("#question", question)
                    page.select_option("#profile", "quick")
                    page.select_option("#backend", "corpus")
                    page.select_option("#corpus", "tiny")
                    page.select_option("#model", args.model)
                    page.click("#submit")
                    page.wait_for_url(re.compile(r"/runs/j-[0-9a-f]{12}$"))
                    return page.url.rsplit("/", 1)[1]

                page.goto(f"{server.url}/")
                page.fill("#question", QUESTIONS[0])
                shot("new-research", full=True)
                if args.pages_only:
                    page.goto(f"{server.url}/corpora?name=tiny&q=Mira+Holt+surveyor")
                    shot("corpora")
                    browser.close()
                    return 0
                first = submit(QUESTIONS[0])
                page.wait_for_selector("#nodes tr[data-node]", timeout=600_000)
                page.wait_for_timeout(1500)
                shot("live-run")
                expect(page.locator("#report-link")).to_be_visible(timeout=1_800_000)
                second = submit(QUESTIONS[1])
                expect(page.locator("#report-link")).to_be_visible(timeout=1_800_000)
                page.goto(f"{server.url}/runs/{first}/report")
                cites = page.locator("#report .cite")
                if cites.count():
                    cites.first.hover()
                shot("report")
                page.goto(f"{server.url}/history")
                shot("history")
                page.goto(f"{server.url}/batch?ids={first},{second}")
                shot("batch")
                page.goto(f"{server.url}/corpora?name=tiny&q=Mira+Holt+surveyor")
                shot("corpora")
                print(f"runs {first} {second}")
                browser.close()
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
