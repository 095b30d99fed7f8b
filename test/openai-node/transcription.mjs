// A realtime transcription session with the official OpenAI Node SDK, as OpenAI's realtime
// transcription guide does it from an app: the backend mints a client secret for
// `session.type: "transcription"` (client.realtime.clientSecrets.create), the client connects
// OpenAIRealtimeWS with that ek_ key (the SDK always names a model; a transcription key ignores
// it), and streams 24 kHz speech: two utterances separated by silence, which server VAD commits.
// The session asks for the transcripts' logprobs (include).
// Usage: OMNISERVE_BASE_URL=https://127.0.0.1:PORT/v1 OMNISERVE_SPEECH_24K=/path/speech.pcm \
//        NODE_EXTRA_CA_CERTS=cert.pem node transcription.mjs
// Prints one JSON line of what it observed.
import OpenAI from "openai";
import { OpenAIRealtimeWS } from "openai/realtime/ws";
import fs from "node:fs";

const baseURL = process.env.OMNISERVE_BASE_URL;
const admin = new OpenAI({ baseURL, apiKey: process.env.OMNISERVE_API_KEY || "unused" });
const secret = await admin.realtime.clientSecrets.create({
  session: {
    type: "transcription",
    audio: { input: {
      format: { type: "audio/pcm", rate: 24000 },
      transcription: { model: "gpt-4o-transcribe", language: "en" },
      turn_detection: { type: "server_vad", silence_duration_ms: 500 },
    } },
    include: ["item.input_audio_transcription.logprobs"],
  },
});
const out = { minted_type: secret.session?.type, minted_object: secret.session?.object, minted_include: secret.session?.include,
  events: {}, order: [], errors: [], log: [] };
const rt = await OpenAIRealtimeWS.create(new OpenAI({ baseURL, apiKey: secret.value }), { model: "gpt-realtime" });
const items = new Map(); // item_id → { deltas, transcript }
let completed = 0;
rt.on("error", (err) => out.errors.push(err.error ? err.error : { message: String(err.message || err) }));
rt.on("event", (ev) => {
  out.events[ev.type] = (out.events[ev.type] || 0) + 1;
  if (ev.type.startsWith("input_audio_buffer.") || ev.type.startsWith("conversation.item.input_audio_transcription.")) {
    out.log.push([ev.type.replace("conversation.item.input_audio_transcription.", "tx.").replace("input_audio_buffer.", ""), ev.item_id, ev.delta ?? ev.transcript]);
  }
  switch (ev.type) {
    case "session.created": out.session_type = ev.session?.type; out.session_include = ev.session?.include; break;
    case "input_audio_buffer.committed": // deltas while the user spoke may have come first
      out.order.push(ev.item_id);
      if (!items.has(ev.item_id)) items.set(ev.item_id, { deltas: "", delta_events: 0 });
      break;
    case "conversation.item.input_audio_transcription.delta": {
      const it = items.get(ev.item_id) ?? { deltas: "", delta_events: 0 };
      it.deltas += ev.delta; it.delta_events++; it.delta_before_completed ??= it.transcript === undefined;
      items.set(ev.item_id, it);
      break;
    }
    case "conversation.item.input_audio_transcription.completed": {
      const it = items.get(ev.item_id) ?? { deltas: "", delta_events: 0 };
      it.transcript = ev.transcript; it.logprobs = ev.logprobs; it.completed_index = completed++;
      items.set(ev.item_id, it);
      break;
    }
  }
});
await new Promise((resolve, reject) => { rt.socket.on("open", resolve); rt.socket.on("error", reject); });

const speech = fs.readFileSync(process.env.OMNISERVE_SPEECH_24K);
const silence = Buffer.alloc(24000 * 2 * 1.5); // 1.5 s
const audio = Buffer.concat([speech, silence, speech, silence]);
for (let off = 0; off < audio.length; off += 4800) { // 100 ms chunks, twice real time
  rt.send({ type: "input_audio_buffer.append", audio: audio.subarray(off, off + 4800).toString("base64") });
  await new Promise((r) => setTimeout(r, 50));
}
const deadline = Date.now() + 60_000;
while (completed < 2 && Date.now() < deadline && out.errors.length === 0) await new Promise((r) => setTimeout(r, 100));
await new Promise((r) => setTimeout(r, 1000)); // anything that would follow (a response must not)
out.items = out.order.map((id) => ({ id, ...items.get(id) }));
rt.close();
console.log(JSON.stringify(out));
