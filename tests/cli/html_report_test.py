#!/usr/bin/env python3
"""remat report --html in a real headless browser (Debian's chromium).

    html_report_test.py path/to/remat

A small matrix and a training run make one page. Checked: nothing on the
page is fetched from anywhere; the page loads with no console error; every
plot is visible (the screenshot is not blank where each plot sits); and its
tables hold the same cells, number for number, as the Markdown report.
"""
import html.parser
import json
import os
import shutil
import subprocess
import sys
import tempfile

from PIL import Image

remat = os.path.abspath(sys.argv[1])
chromium = shutil.which("chromium") or shutil.which("chromium-browser")
failures = []


def fail(what):
    print("FAIL:", what)
    failures.append(what)


def run(*args):
    done = subprocess.run([remat, *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"remat {' '.join(args)}: exit {done.returncode}: {done.stderr}")
    return done.stdout


def browser(*args):
    return subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--enable-logging=stderr", "--v=0", *args], capture_output=True, text=True, timeout=120)


class Tables(html.parser.HTMLParser):
    """Every table row's cell texts, and every element's attributes."""

    def __init__(self):
        super().__init__()
        self.rows, self.cell, self.attrs = [], None, []

    def handle_starttag(self, tag, attrs):
        self.attrs.append((tag, dict(attrs)))
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(self.cell.strip())
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


work = tempfile.mkdtemp()
try:
    os.chdir(work)
    if not chromium:
        sys.exit("no chromium: scripts/setup.sh installs Debian's chromium for this test")
    run("matrix", "--preset", "tiny", "--layers", "2,3", "--strategies", "all",
        "--steps", "1", "--warmup", "0", "--out", "results.h5")
    run("train", "--preset", "tiny", "--steps", "3", "--out", "run.h5")
    markdown = run("report", "results.h5", "run.h5")
    said = run("report", "results.h5", "run.h5", "--html", "page.html")
    if "wrote page.html: one page, 2 tables and 4 plots inline" not in said:
        fail(f"report --html does not say what it wrote: {said[-200:]}")
    page = open("page.html", encoding="utf-8").read()

    # 1. Self-contained: no attribute points anywhere else.
    parsed = Tables()
    parsed.feed(page)
    for tag, attrs in parsed.attrs:
        for name in ("src", "href", "data"):
            if name in attrs:
                fail(f"<{tag} {name}={attrs[name]!r}>: the page fetches something")
        if tag in ("script", "link", "iframe", "img"):
            fail(f"a <{tag}> on the page")

    # 2. It loads with no console error (a copy with a probe script appended
    # measures where each plot is; appended last, it moves nothing).
    probe = page.replace("</body>", """<pre id="layout"></pre><script>
const plots = [...document.querySelectorAll('figure.plot svg')].map(s => {
  const r = s.getBoundingClientRect();
  const k = s.viewBox.baseVal.width / r.width;  // page pixels to the figure's own units
  const texts = [...s.querySelectorAll('text')].map(t => {
    const b = t.getBoundingClientRect();  // after any rotation
    return {text: t.textContent, anchor: t.getAttribute('text-anchor') || 'start', size: t.getAttribute('font-size'),
            bold: t.getAttribute('font-weight') === 'bold', ax: +t.getAttribute('x'), ay: +t.getAttribute('y'),
            left: (b.left - r.left) * k, right: (b.right - r.left) * k};
  });
  return {x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height, width: s.viewBox.baseVal.width, texts};
});
document.getElementById('layout').textContent = JSON.stringify({plots, height: document.documentElement.scrollHeight,
  page_width: document.documentElement.scrollWidth, window_width: innerWidth});
</script></body>""")
    open("probe.html", "w", encoding="utf-8").write(probe)
    dumped = browser("--window-size=1300,1000", "--dump-dom", "file://" + os.path.abspath("probe.html"))
    for line in dumped.stderr.splitlines():
        if "CONSOLE" in line or "Uncaught" in line:
            fail(f"a console message: {line}")
    start = dumped.stdout.find('<pre id="layout">')
    if start < 0:
        sys.exit("the probe found no layout: " + dumped.stderr[-500:])
    layout = json.loads(html.unescape(dumped.stdout[start + len('<pre id="layout">'):dumped.stdout.find("</pre>", start)]))
    if len(layout["plots"]) != 4:
        fail(f"{len(layout['plots'])} plots on the page, expected 4 (tradeoff, timeline, depth, loss)")

    # 2b. Nothing wider than the window, no text outside its panel (600 px
    # cells; a title centred on its panel stays in it), no axis that repeats a
    # tick label (0.0005 and 0.00045 both read "5e-04" once).
    if layout["page_width"] > layout["window_width"]:
        fail(f"the page is {layout['page_width']} px wide in a {layout['window_width']} px window")
    for i, p in enumerate(layout["plots"]):
        for t in p["texts"]:
            if t["left"] < -0.5 or t["right"] > p["width"] + 0.5:
                fail(f"plot {i}: '{t['text']}' runs outside the figure ({t['left']:.0f}..{t['right']:.0f} of {p['width']})")
            if t["bold"]:  # a panel's title: within its panel
                cell = int(t["ax"] // 600)
                if t["left"] < cell * 600 - 0.5 or t["right"] > (cell + 1) * 600 + 0.5:
                    fail(f"plot {i}: the title '{t['text']}' runs outside its panel")
        # An axis's tick labels come one after another: an x axis's share a
        # height (centred), a y axis's a right edge (end-anchored).
        axes, last = [], None
        for t in p["texts"]:
            key = None
            if t["size"] == "11" and t["anchor"] in ("middle", "end"):
                key = ("x", t["ay"]) if t["anchor"] == "middle" else ("y", t["ax"])
            if key is not None and key == last:
                axes[-1].append(t["text"])
            elif key is not None:
                axes.append([t["text"]])
            last = key
        for labels in axes:
            if len(set(labels)) != len(labels):
                fail(f"plot {i}: an axis repeats a tick label: {labels}")

    # 3. Every plot visible: the screenshot of the page itself, at the same
    # width, is not blank (near-white) where each plot sits.
    height = min(int(layout["height"]) + 50, 16000)
    shot = browser(f"--window-size=1300,{height}", "--screenshot=" + os.path.abspath("shot.png"),
                   "file://" + os.path.abspath("page.html"))
    for line in shot.stderr.splitlines():
        if "CONSOLE" in line or "Uncaught" in line:
            fail(f"a console message: {line}")
    image = Image.open("shot.png").convert("L")
    for i, p in enumerate(layout["plots"]):
        box = (int(p["x"]), int(p["y"]), int(p["x"] + min(p["w"], 1300 - p["x"])), int(min(p["y"] + p["h"], height)))
        if box[2] - box[0] < 100 or box[3] - box[1] < 100:
            fail(f"plot {i} is {p['w']}x{p['h']} px: not visible")
            continue
        region = image.crop(box)
        ink = sum(1 for v in region.getdata() if v < 200) / (region.width * region.height)
        if ink < 0.005:
            fail(f"plot {i} at {box} is blank in the screenshot ({ink:.4f} of its pixels drawn)")

    # 4. The page's tables are the Markdown report's, cell for cell.
    md_rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in markdown.splitlines()
               if line.startswith("|") and not set(line) <= set("|-: ")]
    page_rows = [r for r in parsed.rows]
    if md_rows != page_rows:
        for a, b in zip(md_rows, page_rows):
            if a != b:
                fail(f"a table row differs: markdown {a} page {b}")
                break
        else:
            fail(f"{len(md_rows)} rows in the Markdown, {len(page_rows)} on the page")
finally:
    shutil.rmtree(work, ignore_errors=True)

if failures:
    print(f"html report: {len(failures)} check(s) failed")
    sys.exit(1)
print("html report: the page loads, shows every plot, and holds the report's numbers")
