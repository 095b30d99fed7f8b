// The OpenAI Agents SDK voice-agent quick-start (openai.github.io/openai-agents-js, "Voice agents
// quickstart"), unchanged but for where it connects: no server-specific option, the SDK's own
// default model, its WebSocket transport. It speaks one recorded utterance, waits for the
// spoken answer and prints one JSON line of what it observed.
// Usage: OMNISERVE_WS_URL=ws://127.0.0.1:PORT/v1/realtime OMNISERVE_SPEECH=/path/16k.raw node quickstart.mjs
import { RealtimeAgent, RealtimeSession } from "@openai/agents-realtime";
import { readFileSync } from "node:fs";

const agent = new RealtimeAgent({
  name: "Assistant",
  instructions: "You are a helpful assistant",
});
const session = new RealtimeSession(agent);

const out = { errors: [], events: {}, audio_bytes: 0 };
session.on("error", (e) => out.errors.push(String(e?.error?.error?.message ?? e?.error?.message ?? e?.error ?? e)));
session.on("audio", (ev) => { out.audio_bytes += ev.data.byteLength; });
session.on("transport_event", (ev) => {
  out.events[ev.type] = (out.events[ev.type] || 0) + 1;
  if (ev.type === "session.updated") {
    out.instructions = ev.session?.instructions;
    out.model = ev.session?.model;
    out.turn_detection = ev.session?.audio?.input?.turn_detection?.type;
  }
  if (ev.type === "error") out.errors.push(JSON.stringify(ev.error ?? ev));
  if (ev.type === "conversation.item.input_audio_transcription.completed") out.transcript = ev.transcript;
});

await session.connect({ apiKey: "unused", url: process.env.OMNISERVE_WS_URL });

// 16 kHz PCM16 speech → 24 kHz (the session's rate), then a second of silence to end the turn.
const raw = readFileSync(process.env.OMNISERVE_SPEECH);
const src = new Int16Array(raw.buffer, raw.byteOffset, raw.byteLength >> 1);
const n = Math.floor((src.length * 3) / 2);
const pcm = new Int16Array(n + 24000);
for (let i = 0; i < n; i++) {
  const x = (i * 2) / 3, j = Math.floor(x), f = x - j;
  pcm[i] = Math.round(src[j] * (1 - f) + (src[Math.min(j + 1, src.length - 1)] * f));
}
for (let off = 0; off < pcm.length; off += 2400) {
  const chunk = pcm.slice(off, off + 2400);
  session.sendAudio(chunk.buffer);
  await new Promise((r) => setTimeout(r, 20)); // faster than real time, in order
}

const deadline = Date.now() + 90_000;
while (out.audio_bytes < 24000 * 2 && Date.now() < deadline && out.errors.length === 0) {
  await new Promise((r) => setTimeout(r, 100));
}
session.close();
console.log(JSON.stringify(out));
