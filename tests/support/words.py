"""What a person sees on a page, measured in a real browser: words broken across lines, controls
off the screen, and axe-core's accessibility verdict (axe-core vendored from the npm registry,
``tests/support/axe/``; never a CDN)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

AXE = Path(__file__).parent / "axe" / "axe.min.js"

#: Every maximal run of 4+ letters in the page's visible text whose rendered boxes lie on more
#: than one line is a break: a word of natural language split mid-word (an id or key split
#: between its joints splits a run of letters too; split at ``_ : . -`` it does not).
BROKEN_WORDS_JS = r"""
() => {
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const word = /\p{L}{4,}/gu;
  let node;
  while ((node = walker.nextNode())) {
    const el = node.parentElement;
    if (!el || el.closest("script, style, noscript, template, .sr-only, .skip-link")) continue;
    word.lastIndex = 0;
    let m;
    while ((m = word.exec(node.data))) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const boxes = Array.from(range.getClientRects()).filter((r) => r.width > 0 && r.height > 0);
      if (boxes.length < 2) continue;
      const tops = boxes.map((r) => r.top);
      const line = Math.min(...boxes.map((r) => r.height));
      if (Math.max(...tops) - Math.min(...tops) > line / 2) {
        out.push(`${m[0]} in <${el.tagName.toLowerCase()} class="${el.className}">`);
      }
    }
  }
  return out;
}
"""

#: Links and buttons whose box ends right of the screen, outside a block that scrolls on its own
#: (a person would have to scroll the page sideways to reach them, or could not at all).
OFF_SCREEN_JS = r"""
(width) => {
  const out = [];
  for (const el of document.querySelectorAll("main a, main button, main input, main select")) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0 || r.right <= width + 1) continue;
    let up = el.parentElement, inScroller = false;
    while (up && up !== document.body) {
      const s = getComputedStyle(up);
      if (/(auto|scroll)/.test(s.overflowX) && up.scrollWidth > up.clientWidth) {
        inScroller = true;
        break;
      }
      up = up.parentElement;
    }
    const name = (el.textContent || el.value || "").trim().slice(0, 40);
    const where = inScroller ? " (in a scrolling block)" : "";
    out.push(`${el.tagName.toLowerCase()} "${name}" ends at ${Math.round(r.right)}${where}`);
  }
  return out;
}
"""

AXE_RUN_JS = """
async () => {
  const result = await axe.run(document, {
    runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]},
  });
  return result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => {
      const nodes = v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(", ");
      return `${v.id} (${v.impact}): ${nodes}`;
    });
}
"""


def broken_words(page: Any) -> list[str]:
    return list(page.evaluate(BROKEN_WORDS_JS))


def off_screen_controls(page: Any, width: int) -> list[str]:
    return list(page.evaluate(OFF_SCREEN_JS, width))


def axe_violations(page: Any) -> list[str]:
    """axe-core's serious and critical WCAG 2.1 A/AA violations on the page as it stands."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text(encoding="utf-8"))
    return list(page.evaluate(AXE_RUN_JS))
