"""Headless Chromium (Debian's), as a user's browser: a report is opened at
a window width, and what the page then shows is read back -- the text a
reader sees, the boxes that stick out of the page, the headings in order --
by a small script added to a copy of the page.  Screenshots are kept for a
person to look at."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# Runs in the page after it has laid itself out; writes what it saw into a <pre>.
LAYOUT_JS = r"""
window.addEventListener('load', () => {
  const W = document.documentElement.clientWidth;
  const wide = [];
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    const name = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '');
    if (r.width && r.right > W + 1) wide.push(`${name} ends at ${Math.round(r.right)}`);
  }
  const overflowing = [...document.querySelectorAll('*')]
      .filter(e => e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'visible')
      .map(e => e.tagName.toLowerCase() + (e.className ? '.' + e.className : ''));
  const texts = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const t = walk.currentNode.nodeValue.trim();
    if (t && !walk.currentNode.parentElement.closest('script, style')) texts.push(t);
  }
  // every text of the plots, at the size it is drawn (its font size through the scaling the page gives
  // the SVG), smallest first: what a reader of an 800 px window has to read
  const svg_text = [];
  for (const t of document.querySelectorAll('svg text')) {
    const m = t.getScreenCTM();
    const words = t.textContent.trim();
    if (m && words) svg_text.push([parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b), words]);
  }
  svg_text.sort((a, b) => a[0] - b[0]);
  const headings = [...document.querySelectorAll('h1, h2')]
      .map(h => ({level: h.tagName, id: h.id, text: h.textContent}));
  const out = document.createElement('pre');
  out.id = 'rtforge-layout';
  out.textContent = JSON.stringify({width: W, scroll_width: document.documentElement.scrollWidth, wide, overflowing,
                                    texts, headings, svg_text});
  document.body.appendChild(out);
});
"""


def chromium_exe() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.fail("Debian's chromium is not installed (make setup installs it)")
    return exe


def chromium(tmp: Path, *args, width: int = 1400, height: int = 3000) -> subprocess.CompletedProcess:
    base = [chromium_exe(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic",
            "--hide-scrollbars", f"--user-data-dir={tmp / 'chromium-profile'}", f"--window-size={width},{height}",
            # any network access would fail: the report must not need it
            "--host-resolver-rules=MAP * ~NOTFOUND"]
    return subprocess.run(base + list(map(str, args)), capture_output=True, text=True, timeout=180)


def layout(page: Path, width: int, tmp: Path) -> dict:
    """What Chromium shows of page at this window width (see LAYOUT_JS)."""
    probe = tmp / f"{page.stem}-probe-{width}.html"
    html = page.read_text()
    probe.write_text(html.replace("</body>", f"<script>{LAYOUT_JS}</script></body>"))
    r = chromium(tmp, "--virtual-time-budget=10000", "--dump-dom", probe.as_uri(), width=width)
    assert r.returncode == 0, r.stderr[-800:]
    m = re.search(r'<pre id="rtforge-layout">(.*?)</pre>', r.stdout, re.S)
    assert m, "the layout script did not run: " + r.stdout[-300:]
    text = m[1].replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")
    return json.loads(text)


def screenshot(page: Path, width: int, out: Path, height: int = 4000) -> Path:
    # a profile of its own: tests running side by side (pytest -n) share the screenshots' folder,
    # and two Chromiums on one profile refuse each other
    with tempfile.TemporaryDirectory(prefix="rtforge-chromium-") as profile:
        r = chromium(Path(profile), f"--screenshot={out}", page.as_uri(), width=width, height=height)
    assert r.returncode == 0 and out.exists(), r.stderr[-800:]
    return out
