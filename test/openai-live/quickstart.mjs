// OpenAI's GPT-Live WebSocket quick-start (developers.openai.com, "WebSockets" with the Live API:
// LiveWS from the official SDK, Marin, PCM16 at 24 kHz, a Responses backend with web search),
// unchanged but for where it connects (baseURL) and the key. The microphone is real speech
// (pocketsphinx-testdata's "go forward ten meters", 16 kHz, resampled to the session's 24 kHz)
// streamed at real time, then silence, as a client streams continuously. Around the
// quick-start the script speaks over the reply (barge-in), mutes, appends context and closes,
// and prints one JSON line of what it observed (driven by test/live_sdk_test.go).
// Usage: OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 OPENAI_API_KEY=... OMNISERVE_SPEECH=/path/16k.raw node quickstart.mjs
import OpenAI from "openai";
import { LiveWS } from "openai/resources/live/ws";
import { readFileSync } from "node:fs";

const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY });
const live = new LiveWS(client);

const out = {
  errors: [], events: {}, input_transcript: "", output_transcript: "", audio_bytes: 0,
  acks: {}, usage: [], muted: false, unmuted: false, started: null, closed: null, close_code: null,
  first_audio_ms: null, barge_in_silence_ms: null, pacing: null, input_deltas: [], timeline_ok: true,
};
const t0 = Date.now();
let lastAudioAt = 0;
const audioLog = []; // [received ms, bytes]

live.on("error", (err) => out.errors.push(JSON.stringify(err.error ?? err.message)));
live.on("event", (ev) => { out.events[ev.type] = (out.events[ev.type] || 0) + 1; });
live.on("session.started", (ev) => {
  out.started = ev.session;
  console.error(`Session ready: ${ev.session.id} ${ev.session.model}`);
});
live.on("session.input_transcript.delta", (ev) => {
  out.input_transcript += ev.delta;
  out.input_deltas.push([ev.start_ms, ev.end_ms]);
  console.error(`you: ${ev.delta} [${ev.start_ms}-${ev.end_ms} ms]`);
});
live.on("session.output_transcript.delta", (ev) => {
  out.output_transcript += ev.delta;
  if (!(ev.end_ms > ev.start_ms)) out.timeline_ok = false;
});
live.on("session.output_audio.delta", (ev) => {
  const n = Buffer.from(ev.delta, "base64").length;
  out.audio_bytes += n;
  lastAudioAt = Date.now();
  audioLog.push([lastAudioAt - t0, n]);
  if (out.first_audio_ms === null) out.first_audio_ms = lastAudioAt - t0;
});
for (const k of ["instructions", "thinking", "commentary"]) {
  live.on(`session.${k}.appended`, (ev) => { out.acks[k] = [ev.start_ms, ev.end_ms, ev.client_event_id]; });
}
live.on("session.input_audio.muted", () => { out.muted = true; });
live.on("session.input_audio.unmuted", () => { out.unmuted = true; });
live.on("session.usage.updated", (ev) => { out.usage.push(ev.usage.seconds); });
const closed = new Promise((resolve) => {
  live.on("session.closed", (ev) => { out.closed = { reason: ev.reason, usage: ev.usage, id: ev.session?.id }; });
  live.on("close", (code) => { out.close_code = code; resolve(); });
});

live.send({
  type: "session.start",
  session: {
    model: "gpt-live-1",
    instructions: "Be concise. Delegate tasks that need current information or tools.",
    audio: { format: { type: "audio/pcm", rate: 24000 }, output: { voice: "marin" } },
    delegation: { type: "responses", responses: { model: "gpt-5.6-luna", tools: [{ type: "web_search" }] } },
  },
});
while (!out.started && Date.now() - t0 < 30_000 && out.errors.length === 0) await sleep(20);

// The microphone: 16 kHz speech → 24 kHz PCM16, queued; 100 ms appends at real time, silence
// whenever nothing is queued.
const raw = readFileSync(process.env.OMNISERVE_SPEECH);
const src = new Int16Array(raw.buffer, raw.byteOffset, raw.byteLength >> 1);
const speech = new Int16Array(Math.floor((src.length * 3) / 2));
for (let i = 0; i < speech.length; i++) {
  const x = (i * 2) / 3, j = Math.floor(x), f = x - j;
  speech[i] = Math.round(src[j] * (1 - f) + src[Math.min(j + 1, src.length - 1)] * f);
}
let queue = [];
const say = () => { queue = queue.concat(Array.from(speech)); };
let streaming = true;
const mic = (async () => {
  let next = Date.now();
  while (streaming) {
    const chunk = new Int16Array(2400);
    const take = queue.splice(0, 2400);
    chunk.set(take);
    live.send({ type: "session.input_audio.append", audio: Buffer.from(chunk.buffer).toString("base64") });
    next += 100;
    await sleep(Math.max(0, next - Date.now()));
  }
})();

say();
// The model's own reply, as paced audio with its transcript.
await until(() => out.first_audio_ms !== null && Date.now() - t0 - out.first_audio_ms > 2000, 40_000);
{
  const from = out.first_audio_ms, upto = Date.now() - t0;
  const bytes = audioLog.filter(([at]) => at >= from).reduce((a, [, n]) => a + n, 0);
  out.pacing = { audio_s: bytes / 48000, wall_s: (audioLog[audioLog.length - 1][0] - from) / 1000, until_s: (upto - from) / 1000 };
}
// Barge-in: speak over the reply; the track goes silent.
const bargeAt = Date.now();
say();
await until(() => lastAudioAt > 0 && Date.now() - lastAudioAt > 1000, 10_000);
out.barge_in_silence_ms = lastAudioAt - bargeAt;
await sleep(4000);

// Mute, an append acknowledged on the timeline, unmute.
live.send({ type: "session.input_audio.mute" });
live.send({ type: "session.instructions.append", event_id: "evt_instr", content: "Keep answers short.", delegation_id: null });
live.send({ type: "session.thinking.append", event_id: "evt_think", content: "The user is testing the microphone.", delegation_id: null });
await until(() => out.acks.instructions && out.acks.thinking, 10_000);
live.send({ type: "session.input_audio.unmute" });
await until(() => out.unmuted, 5_000);

// Usage comes every 15 s of timeline; then close and wait for the final usage.
await until(() => out.usage.length > 0, 20_000);
live.send({ type: "session.close" });
await Promise.race([closed, sleep(15_000)]);
streaming = false;
await mic;
live.close();
console.log(JSON.stringify(out));

function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }
async function until(cond, ms) {
  const deadline = Date.now() + ms;
  while (!cond() && Date.now() < deadline) await sleep(20);
}
