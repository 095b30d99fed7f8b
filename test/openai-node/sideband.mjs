// The server-side half of a WebRTC call with the official OpenAI Node SDK: the app's backend
// joins a live call (the browser has the audio) with OpenAIRealtimeWS({callID}) and its API
// key, as OpenAI's server-side controls guide shows, changes the session, adds a user message
// and asks for a response; the call answers it.
// Usage: OMNISERVE_BASE_URL=https://127.0.0.1:PORT/v1 OMNISERVE_API_KEY=sk CALL_ID=rtc_… \
//        NODE_EXTRA_CA_CERTS=cert.pem node sideband.mjs
// Prints one JSON line of what it observed.
import OpenAI from "openai";
import { OpenAIRealtimeWS } from "openai/realtime/ws";

const client = new OpenAI({ baseURL: process.env.OMNISERVE_BASE_URL, apiKey: process.env.OMNISERVE_API_KEY });
const rt = await OpenAIRealtimeWS.create(client, { callID: process.env.CALL_ID });
const out = { events: {}, errors: [] };
let done = null;
rt.on("error", (err) => out.errors.push(err.error ? err.error : { message: String(err.message || err) }));
rt.on("event", (ev) => {
  out.events[ev.type] = (out.events[ev.type] || 0) + 1;
  if (ev.type === "session.updated") out.instructions = ev.session?.instructions;
  if (ev.type === "response.done") done = ev.response;
});
await new Promise((resolve, reject) => { rt.socket.on("open", resolve); rt.socket.on("error", reject); });
rt.send({ type: "session.update", session: { type: "realtime", instructions: "Answer in one word." } });
rt.send({ type: "conversation.item.create", item: { type: "message", role: "user", content: [{ type: "input_text", text: "Say hello." }] } });
rt.send({ type: "response.create", response: { max_output_tokens: 16 } });
const deadline = Date.now() + 60_000;
while (!done && Date.now() < deadline && out.errors.length === 0) await new Promise((r) => setTimeout(r, 50));
out.status = done?.status;
out.output_types = (done?.output || []).map((o) => o.type);
rt.close();
console.log(JSON.stringify(out));
