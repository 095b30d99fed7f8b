// Renders a bench report.html (internal/benchreport) in headless Chromium and reports, as a JSON
// summary on the last stdout line, what the page actually shows:
//   - every request the page made besides the file itself (blocked: the page must need none);
//   - per <svg>: its class, its accessible title, its rendered size, and for histograms the bars
//     and timeline marks that have a non-empty rendered box;
//   - page and console errors.
// Screenshots go to OUT_DIR (report.png, report-phone.png). Exit 1 when the page failed to load.
//
// Env: REPORT_HTML (a path), OUT_DIR, CHROMIUM (default /usr/bin/chromium).
import puppeteer from "puppeteer-core";
import path from "node:path";
import { pathToFileURL } from "node:url";

const file = process.env.REPORT_HTML;
const out = process.env.OUT_DIR;
if (!file || !out) {
  console.error("REPORT_HTML and OUT_DIR are required");
  process.exit(2);
}
const url = pathToFileURL(path.resolve(file)).href;
const summary = { ok: false, blocked: [], pageErrors: [] };

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run"],
});
try {
  const page = await browser.newPage();
  page.on("pageerror", (e) => summary.pageErrors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error") summary.pageErrors.push("console: " + m.text());
  });
  await page.setRequestInterception(true);
  page.on("request", (r) => {
    if (r.url() === url) return r.continue();
    summary.blocked.push(r.url());
    return r.abort();
  });
  await page.setViewport({ width: 1200, height: 900 });
  const res = await page.goto(url, { waitUntil: "load", timeout: 15000 });
  if (!res || !res.ok()) throw new Error(`loading ${url}: ${res && res.status()}`);

  summary.title = await page.title();
  summary.svgs = await page.$$eval("svg", (svgs) => svgs.map((svg) => {
    const visible = (el) => { const b = el.getBoundingClientRect(); return b.width > 0 && b.height > 0; };
    const box = svg.getBoundingClientRect();
    const labelled = (svg.getAttribute("aria-labelledby") || "").split(/\s+/).filter(Boolean)
      .map((id) => document.getElementById(id)?.textContent || "");
    const bars = [...svg.querySelectorAll("rect.bar")];
    const marks = [...svg.querySelectorAll("g.mark")];
    const byKind = {};
    for (const m of marks.filter(visible)) byKind[m.dataset.kind] = (byKind[m.dataset.kind] || 0) + 1;
    return {
      class: svg.getAttribute("class"),
      figure: svg.dataset.figure || "",
      role: svg.getAttribute("role"),
      title: labelled[0] || "",
      desc: labelled[1] || "",
      width: box.width,
      height: box.height,
      bars: bars.length,
      visibleBars: bars.filter(visible).length,
      barCounts: bars.reduce((n, b) => n + Number(b.dataset.count), 0),
      // Every bar lies inside its plot, and the tallest bar is the bin with the most samples.
      barsInside: bars.every((b) => {
        const r = b.getBoundingClientRect();
        return r.left >= box.left - 1 && r.right <= box.right + 1 && r.top >= box.top - 1 && r.bottom <= box.bottom + 1;
      }),
      tallestCount: bars.length ? Number(bars.reduce((a, b) =>
        b.getBoundingClientRect().height > a.getBoundingClientRect().height ? b : a).dataset.count) : 0,
      marks: marks.length,
      visibleMarks: byKind,
      texts: svg.querySelectorAll("text").length,
    };
  }));
  await page.screenshot({ path: path.join(out, "report.png"), fullPage: true });
  await page.setViewport({ width: 390, height: 844, isMobile: true });
  summary.phoneOverflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth + 1);
  await page.screenshot({ path: path.join(out, "report-phone.png"), fullPage: true });
  summary.ok = true;
} catch (e) {
  summary.error = String(e && e.stack || e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(summary));
process.exit(summary.ok ? 0 : 1);
