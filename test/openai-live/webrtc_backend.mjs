// The app's backend of a GPT-Live WebRTC session with the official Node SDK (openai 7.55.0), as
// OpenAI's Live WebRTC guide has it: the browser's SDP offer goes through the app's server,
// which holds the key and creates the session with client.live.create({session, transport:
// {type: "webrtc", sdp}}), hands the answer back, and joins the session as its sideband with
// SidebandWS({session_id, graceful_close: true}) to watch and steer it. The "browser" is the Go
// test's pion peer (test/live_webrtc_test.go): it writes its offer as one JSON line on stdin
// ({"sdp"}), reads the answer as the first line of stdout ({"session_id", "sdp"}), and speaks
// once the second line ({"attached": true}) says the sideband is in. The sideband sends
// session.update, checks that a second sideband gets it replayed under the same event_id, waits
// for the user's words and the model's reply (transcripts and reflected audio), then
// session.close, and the last line is a JSON summary of what it observed.
// Usage: OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 OPENAI_API_KEY=... node webrtc_backend.mjs
import OpenAI from "openai";
import { SidebandWS } from "openai/resources/live/sideband/ws";
import { createInterface } from "node:readline";

const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY });
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const { sdp } = JSON.parse((await lines.next()).value);

const created = await client.live.create({
  session: { model: "gpt-live-1", instructions: "Be concise.", audio: { output: { voice: "marin" } } },
  transport: { type: "webrtc", sdp },
});
console.log(JSON.stringify({ session_id: created.session.id, sdp: created.transport.sdp }));

const out = {
  errors: [], events: {}, input_transcript: "", output_transcript: "", reflected_in_bytes: 0,
  reflected_out_bytes: 0, reflected_out_timed: true, updated: null, closed: null, close_code: null,
};
const sb = new SidebandWS(client, { session_id: created.session.id, graceful_close: true });
sb.on("error", (err) => out.errors.push(JSON.stringify(err.error ?? err.message)));
sb.on("event", (ev) => { out.events[ev.type] = (out.events[ev.type] || 0) + 1; });
sb.on("session.input_transcript.delta", (ev) => { out.input_transcript += ev.delta; });
sb.on("session.output_transcript.delta", (ev) => { out.output_transcript += ev.delta; });
sb.on("session.input_audio.append", (ev) => { out.reflected_in_bytes += Buffer.from(ev.audio, "base64").length; });
sb.on("session.output_audio.delta", (ev) => {
  out.reflected_out_bytes += Buffer.from(ev.delta, "base64").length;
  if (!(ev.end_ms > ev.start_ms)) out.reflected_out_timed = false;
});
const updated = new Promise((resolve) => sb.on("session.updated", (ev) => {
  out.updated = { client_event_id: ev.client_event_id, delegation: ev.session?.delegation, event_id: ev.event_id };
  resolve();
}));
const closed = new Promise((resolve) => {
  sb.on("session.closed", (ev) => { out.closed = { reason: ev.reason, id: ev.session?.id, seconds: ev.usage?.seconds }; });
  sb.on("close", (code) => { out.close_code = code; resolve(); });
});

sb.send({ type: "session.update", event_id: "evt_backend_update",
  session: { delegation: { type: "client", acknowledgement_delay_ms: 250 } } });
await updated;
// A second sideband joining now gets the session's last 3 s replayed first, under the ids the
// first one got (the timeline has not started: the microphone speaks after "attached").
const replay = { types: [], update_id: null };
const sb2 = new SidebandWS(client, { session_id: created.session.id, graceful_close: true });
sb2.on("error", (err) => out.errors.push("second sideband: " + JSON.stringify(err.error ?? err.message)));
sb2.on("event", (ev) => {
  replay.types.push(ev.type);
  if (ev.type === "session.updated" && ev.client_event_id === "evt_backend_update") replay.update_id = ev.event_id;
});
const waitReplay = Date.now() + 10_000;
while (replay.update_id === null && Date.now() < waitReplay) await new Promise((r) => setTimeout(r, 20));
sb2.close();
out.replay = replay;
console.log(JSON.stringify({ attached: true }));

const deadline = Date.now() + 90_000;
// The user's words, and a second of the model's reply (PCM16 at 24 kHz) played on the track.
const heard = () => out.input_transcript.toLowerCase().includes("forward") && out.output_transcript.trim() !== "" &&
  out.reflected_out_bytes >= 48000;
while (!heard() && Date.now() < deadline && out.errors.length === 0) await new Promise((r) => setTimeout(r, 50));
sb.send({ type: "session.close", event_id: "evt_backend_close" });
await Promise.race([closed, new Promise((r) => setTimeout(r, 15_000))]);
console.log(JSON.stringify(out));
process.exit(0);
