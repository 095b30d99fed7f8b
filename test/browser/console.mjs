// Drives the omniserve console in headless Chromium with real speech as the microphone
// (Chromium's fake capture device playing SPEECH_WAV in a loop) and checks, from the page's own
// counters (window.omni.stats):
//   - a wrong API key is refused in place, the right one connects;
//   - the user's transcript appears; assistant audio plays;
//   - barge-in (the looped speech starting again over the reply) empties the playback buffer;
//   - a network cut mid-reply (CUT_URL arms the test's proxy) resumes the same session and the
//     conversation goes on;
//   - a dropped connection reconnects with the microphone off meanwhile; disconnect turns it off.
// Screenshots go to OUT_DIR. The last stdout line is a JSON summary; exit 1 on any failure.
//
// Env: OMNISERVE_URL (http://host:port/), OMNISERVE_API_KEY, SPEECH_WAV, OUT_DIR,
// CHROMIUM (default /usr/bin/chromium), CUT_URL (optional: POST arms a cut of the connection
// that next carries assistant audio).
import puppeteer from "puppeteer-core";
import path from "node:path";

const base = process.env.OMNISERVE_URL;
const key = process.env.OMNISERVE_API_KEY || "";
const wav = process.env.SPEECH_WAV;
const out = process.env.OUT_DIR;
if (!base || !wav || !out) {
  console.error("OMNISERVE_URL, SPEECH_WAV and OUT_DIR are required");
  process.exit(2);
}

const t0 = Date.now();
const log = (msg) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);
const pageErrors = [];
const summary = { steps: [] };

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox", // containers and CI run as root
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--no-first-run",
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
    `--use-file-for-fake-audio-capture=${wav}`,
    "--autoplay-policy=no-user-gesture-required",
    "--allow-loopback-in-peer-connection", // the call's candidates on a machine with only loopback
  ],
});

let page;
async function step(name, fn) {
  const s = Date.now();
  await fn();
  summary.steps.push({ name, ms: Date.now() - s });
  log(`ok: ${name} (${Date.now() - s} ms)`);
}
const stats = () => page.evaluate(() => JSON.parse(JSON.stringify(window.omni.stats)));
const until = (fn, timeout, arg) => page.waitForFunction(fn, { timeout, polling: 100 }, arg);

try {
  page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  // The refused key's 401 is expected; any other console error is a page bug.
  page.on("console", (m) => {
    if (m.type() === "error" && !/status of 401/.test(m.text())) pageErrors.push("console: " + m.text());
  });

  await step("page loads without the API key", async () => {
    const res = await page.goto(base, { waitUntil: "load", timeout: 15000 });
    if (!res.ok()) throw new Error(`GET ${base}: ${res.status()}`);
    await until(() => window.omni && window.omni.stats.status === "idle", 5000);
  });

  if (key) {
    await step("a wrong API key is refused in place", async () => {
      await page.type("#apikey", "wrong-" + key);
      await page.click("#connect");
      await until(() => window.omni.stats.status === "error" &&
        window.omni.stats.errors.some((e) => e.code === "invalid_api_key"), 10000);
      const shown = await page.$eval("#transcript li.error", (li) => li.textContent);
      if (!/invalid_api_key/.test(shown)) throw new Error("error not shown in place: " + shown);
      const s = await stats();
      if (s.micActive) throw new Error("microphone on after a refused connection");
    });
  }

  await step("connects hands-free with the microphone on", async () => {
    await page.$eval("#apikey", (el) => { el.value = ""; });
    if (key) await page.type("#apikey", key);
    await page.click('input[name="mode"][value="handsfree"]');
    // The WebSocket first (its playback, resume and reconnect are checked below); WebRTC, the
    // default where the browser has it, is the last step.
    await page.click('input[name="transport"][value="websocket"]');
    await page.click("#connect");
    await until(() => window.omni.stats.sessionReady && window.omni.stats.micActive, 30000);
    const s = await stats();
    if (s.transport !== "websocket") throw new Error("transport " + s.transport);
  });

  await step("the user transcript appears", async () => {
    await until(() => window.omni.stats.userTranscripts.some((t) => t.length > 0), 60000);
    await until(() => document.querySelector("#transcript li.user") !== null, 5000);
  });

  await step("assistant audio plays", async () => {
    await until(() => window.omni.stats.samplesPlayed >= 24000 / 2, 60000); // half a second heard
  });

  await step("barge-in empties the playback buffer", async () => {
    await until(() => window.omni.stats.flushes.some((f) => f.reason !== "disconnect" && f.dropped > 0 && f.bufferedAfter === 0), 60000);
    // Nothing of the interrupted reply may keep playing: the buffer stays at what arrives after.
    const s = await stats();
    summary.bargeIn = s.flushes.find((f) => f.reason !== "disconnect" && f.dropped > 0);
  });

  if (process.env.CUT_URL) {
    await step("a network cut mid-reply resumes the same session", async () => {
      const before = await stats();
      const r = await fetch(process.env.CUT_URL, { method: "POST" });
      if (!r.ok) throw new Error(`arming the cut: HTTP ${r.status}`);
      await until((n) => window.omni.stats.resumes > n && window.omni.stats.sessionReady && window.omni.stats.micActive,
        60000, before.resumes);
      const s = await stats();
      if (s.sessionId !== before.sessionId) throw new Error(`a new session ${s.sessionId} instead of resuming ${before.sessionId}`);
      summary.resume = { sessionId: s.sessionId, resumes: s.resumes, connects: s.connects - before.connects };
      // The conversation goes on over the new socket: more reply audio arrives and plays.
      await until((n) => window.omni.stats.samplesReceived > n, 60000, s.samplesReceived);
    });
  }

  await step("screenshots", async () => {
    await page.screenshot({ path: path.join(out, "console.png"), fullPage: true });
    await page.setViewport({ width: 390, height: 844 }); // isMobile would reload the page
    await page.screenshot({ path: path.join(out, "console-phone.png"), fullPage: true });
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    if (overflow > 1) throw new Error(`the page is ${overflow}px wider than a phone screen`);
    await page.setViewport({ width: 1280, height: 900 });
  });

  await step("a dropped connection reconnects, microphone off meanwhile", async () => {
    const before = (await stats()).connects;
    await page.evaluate(() => window.omni.drop());
    await until(() => window.omni.stats.status === "reconnecting", 5000);
    const s = await stats();
    if (s.micActive) throw new Error("microphone still on after the connection dropped");
    await until((n) => window.omni.stats.connects > n && window.omni.stats.sessionReady && window.omni.stats.micActive, 30000, before);
  });

  await step("disconnect turns the microphone off", async () => {
    await page.click("#disconnect");
    await until(() => window.omni.stats.status === "idle" && !window.omni.stats.micActive, 10000);
    await new Promise((r) => setTimeout(r, 1500));
    const s = await stats();
    if (s.status !== "idle" || s.micActive) throw new Error(`after disconnect: status ${s.status}, mic ${s.micActive}`);
  });

  await step("push-to-talk with the Space key", async () => {
    const before = await stats();
    await page.click('input[name="mode"][value="ptt"]');
    await page.click("#connect");
    await until(() => window.omni.stats.sessionReady && window.omni.stats.micActive, 30000);
    const talkVisible = await page.$eval("#talk", (b) => !b.hidden && !b.disabled);
    if (!talkVisible) throw new Error("the talk button is not usable in push-to-talk mode");
    await page.focus("#talk"); // keyboard users Tab to the button and hold Space
    const sent = (await stats()).samplesSent;
    await page.keyboard.down(" ");
    await new Promise((r) => setTimeout(r, 6000)); // longer than one loop of the fake microphone
    await page.keyboard.up(" ");
    const held = (await stats()).samplesSent - sent;
    if (held < 24000 * 5) throw new Error(`only ${held} samples sent while Space was held`);
    await until((b) => window.omni.stats.userTranscripts.length > b.t && window.omni.stats.audioDeltas > b.a, 60000,
      { t: before.userTranscripts.length, a: before.audioDeltas });
    const idle = (await stats()).samplesSent;
    await new Promise((r) => setTimeout(r, 500));
    if ((await stats()).samplesSent !== idle) throw new Error("audio is sent while Space is up");
    summary.ptt = { heldSamples: held, transcript: (await stats()).userTranscripts.at(-1) };
    await page.click("#disconnect");
    await until(() => window.omni.stats.status === "idle" && !window.omni.stats.micActive, 10000);
  });

  await step("WebRTC by default: the call hears the user, its audio plays, barge-in cuts it", async () => {
    const before = await stats();
    await page.click('input[name="transport"][value="auto"]');
    await page.click('input[name="mode"][value="handsfree"]');
    await page.click("#connect");
    await until(() => window.omni.stats.transport === "webrtc" && window.omni.stats.sessionReady && window.omni.stats.micActive, 30000);
    const shown = await page.$eval("#transport", (el) => el.textContent);
    if (!/WebRTC/.test(shown)) throw new Error("the page does not show the transport: " + shown);
    await until((n) => window.omni.stats.userTranscripts.length > n, 60000, before.userTranscripts.length);
    // The reply arrives as RTP on the call's track, audible (Chromium's decoded level), and no
    // audio delta comes on the data channel.
    await until(() => window.omni.stats.rtp.packets > 20 && window.omni.stats.rtp.energy > 0, 60000);
    // The looping fake microphone speaks over a reply: server VAD cancels it.
    await until((n) => window.omni.stats.turns.slice(n).some((t) => t.status === "cancelled"), 90000, before.turns.length);
    // The Turns row times the call's audio from output_audio_buffer.started / .stopped.
    await until((n) => window.omni.stats.turns.slice(n).some((t) => t.firstAudioMs > 0 && t.audioMs > 0), 60000, before.turns.length);
    const s = await stats();
    if (s.audioDeltas !== before.audioDeltas) throw new Error(`${s.audioDeltas - before.audioDeltas} audio deltas on the data channel`);
    summary.webrtc = { rtp: s.rtp, transcript: s.userTranscripts.at(-1), turns: s.turns.slice(before.turns.length).map((t) => `${t.status}/${t.reason}`),
      timed: s.turns.slice(before.turns.length).map((t) => ({ firstAudioMs: t.firstAudioMs, audioMs: t.audioMs })) };
    await page.click("#disconnect");
    await until(() => window.omni.stats.status === "idle" && !window.omni.stats.micActive, 10000);
  });

  if (pageErrors.length) throw new Error("page errors: " + pageErrors.join("; "));
  const s = await stats();
  Object.assign(summary, {
    ok: true,
    connects: s.connects, reconnects: s.reconnects,
    userTranscripts: s.userTranscripts, assistantTranscripts: s.assistantTranscripts,
    samplesSent: s.samplesSent, samplesReceived: s.samplesReceived, samplesPlayed: s.samplesPlayed,
    underruns: s.underruns, flushes: s.flushes, turns: s.turns,
    errors: s.errors.map((e) => e.code),
    ms: Date.now() - t0,
  });
} catch (e) {
  summary.ok = false;
  summary.error = String(e && e.stack || e);
  summary.pageErrors = pageErrors;
  try {
    summary.stats = await stats();
    await page.screenshot({ path: path.join(out, "failure.png"), fullPage: true });
  } catch (_) { /* the page may be gone */ }
} finally {
  await browser.close();
}
console.log(JSON.stringify(summary));
process.exit(summary.ok ? 0 : 1);
