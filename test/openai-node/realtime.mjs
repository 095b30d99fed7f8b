// OpenAI Node SDK Realtime (GA, OpenAIRealtimeWS over wss) against a running omniserve server.
// Usage: OMNISERVE_BASE_URL=https://127.0.0.1:PORT/v1 OMNISERVE_MODEL=dummy:tiny \
//        OMNISERVE_SPEECH_24K=/path/speech.pcm NODE_EXTRA_CA_CERTS=cert.pem node realtime.mjs
// The flow is the SDK's documented one: wait for session.created, session.update, stream 24 kHz
// speech, let server_vad take the turn, read the audio, then talk over the next answer (barge-in)
// and truncate it, then ask for an out-of-band response. Prints one JSON line with what it observed; exits non-zero on a mismatch.
import OpenAI from "openai";
import { OpenAIRealtimeWS } from "openai/realtime/ws";
import assert from "node:assert/strict";
import fs from "node:fs";

const client = new OpenAI({ baseURL: process.env.OMNISERVE_BASE_URL, apiKey: process.env.OMNISERVE_API_KEY || "unused" });
const rt = await OpenAIRealtimeWS.create(client, { model: process.env.OMNISERVE_MODEL });
const speech = fs.readFileSync(process.env.OMNISERVE_SPEECH_24K);
const out = { events: {} };
const errors = [];
const waiters = [];
const seen = [];

rt.on("error", (err) => errors.push(err.error ? err.error : { message: String(err.message || err) }));
rt.on("event", (ev) => {
  out.events[ev.type] = (out.events[ev.type] || 0) + 1;
  seen.push(ev);
  for (const w of [...waiters]) {
    if (w.match(ev)) {
      waiters.splice(waiters.indexOf(w), 1);
      clearTimeout(w.timer);
      w.resolve(ev);
    }
  }
});

// next resolves with the first event of type after the call (or already seen since mark).
function next(type, timeoutMs = 60_000, pred = () => true) {
  return new Promise((resolve, reject) => {
    const w = { match: (ev) => ev.type === type && pred(ev), resolve };
    w.timer = setTimeout(() => {
      waiters.splice(waiters.indexOf(w), 1);
      reject(new Error(`no ${type} within ${timeoutMs} ms; errors: ${JSON.stringify(errors)}; last: ${seen.slice(-8).map((e) => e.type)}`));
    }, timeoutMs);
    waiters.push(w);
  });
}

function stream(pcm, chunkMs = 100) {
  const step = 48 * chunkMs; // 24 kHz mono PCM16
  for (let i = 0; i < pcm.length; i += step) {
    rt.send({ type: "input_audio_buffer.append", audio: pcm.subarray(i, Math.min(i + step, pcm.length)).toString("base64") });
  }
}
const silence = (ms) => Buffer.alloc(48 * ms);

// checkUsage asserts a response.done usage has OpenAI's shape, every count a non-negative
// integer, and that the parts add up: total = input + output, input = text + audio + image,
// output = text + audio, cached = its text + audio + image, each cached part within its input.
function checkUsage(u, what) {
  assert.ok(u, `${what}: response.done carries usage`);
  const int = (v, k) => assert.ok(Number.isInteger(v) && v >= 0, `${what}: usage ${k} is a non-negative integer: ${v}`);
  const i = u.input_token_details, o = u.output_token_details, c = i?.cached_tokens_details;
  assert.ok(i && o && c, `${what}: usage has input_token_details, output_token_details and cached_tokens_details`);
  for (const [k, v] of Object.entries({ total: u.total_tokens, input: u.input_tokens, output: u.output_tokens,
    "input.text": i.text_tokens, "input.audio": i.audio_tokens, "input.image": i.image_tokens, cached: i.cached_tokens,
    "cached.text": c.text_tokens, "cached.audio": c.audio_tokens, "cached.image": c.image_tokens,
    "output.text": o.text_tokens, "output.audio": o.audio_tokens })) int(v, k);
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens, `${what}: total = input + output`);
  assert.equal(u.input_tokens, i.text_tokens + i.audio_tokens + i.image_tokens, `${what}: input = its parts`);
  assert.equal(u.output_tokens, o.text_tokens + o.audio_tokens, `${what}: output = its parts`);
  assert.equal(i.cached_tokens, c.text_tokens + c.audio_tokens + c.image_tokens, `${what}: cached = its parts`);
  assert.ok(c.text_tokens <= i.text_tokens && c.audio_tokens <= i.audio_tokens, `${what}: cached within input`);
  return u;
}

// 1. session.created comes first, unprompted, with the full GA session.
const created = await next("session.created", 15_000);
assert.equal(created.session.type, "realtime");
assert.deepEqual(created.session.output_modalities, ["audio"]);
assert.deepEqual(created.session.audio.input.format, { type: "audio/pcm", rate: 24000 });
assert.deepEqual(created.session.audio.output.format, { type: "audio/pcm", rate: 24000 });
assert.equal(created.session.audio.input.turn_detection.type, "server_vad");
assert.equal(created.session.audio.input.turn_detection.create_response, true);
assert.equal(created.session.audio.input.turn_detection.interrupt_response, true);

// 2. session.update (GA shape).
const updatedP = next("session.updated", 15_000);
rt.send({
  type: "session.update",
  session: {
    type: "realtime", instructions: "You are a terse assistant.", output_modalities: ["audio"], max_output_tokens: 8,
    audio: { input: { format: { type: "audio/pcm", rate: 24000 }, turn_detection: { type: "server_vad", silence_duration_ms: 500 } },
      output: { format: { type: "audio/pcm" }, voice: "alloy" } },
  },
});
const updated = await updatedP;
assert.equal(updated.session.instructions, "You are a terse assistant.");
assert.equal(updated.session.max_output_tokens, 8);

// 3. Stream 24 kHz speech then silence: server_vad takes the turn and answers.
const startedP = next("input_audio_buffer.speech_started");
const stoppedP = next("input_audio_buffer.speech_stopped");
const committedP = next("input_audio_buffer.committed");
const transcriptP = next("conversation.item.input_audio_transcription.completed", 90_000);
const createdP = next("response.created", 90_000);
const deltaP = next("response.output_audio.delta", 90_000);
const doneP = next("response.done", 120_000);
let transcriptDeltas = "";
rt.on("response.output_audio_transcript.delta", (ev) => { transcriptDeltas += ev.delta; });
// Input transcription is on by default here: its deltas come as the speech is decoded, per item.
const inputDeltas = {};
rt.on("conversation.item.input_audio_transcription.delta", (ev) => {
  assert.equal(ev.content_index, 0);
  inputDeltas[ev.item_id] = (inputDeltas[ev.item_id] || "") + ev.delta;
});
let audioBytes = 0;
rt.on("response.output_audio.delta", (ev) => { audioBytes += Buffer.from(ev.delta, "base64").length; });
stream(speech);
stream(silence(1500));
const started = await startedP, stopped = await stoppedP, committed = await committedP;
assert.ok(started.item_id && started.item_id === committed.item_id, "speech_started.item_id is the committed item");
assert.ok(stopped.audio_end_ms > started.audio_start_ms);
const tr = await transcriptP;
assert.equal(tr.item_id, committed.item_id);
assert.equal(inputDeltas[committed.item_id], tr.transcript, "input transcription deltas join into the item's transcript");
const resp = await createdP;
assert.equal(resp.response.status, "in_progress");
await deltaP;
const done = await doneP;
const transcriptDone = seen.filter((e) => e.type === "response.output_audio_transcript.done").at(-1);
assert.ok(["completed", "incomplete"].includes(done.response.status), done.response.status);
const u = checkUsage(done.response.usage, "turn 1");
assert.ok(u.input_token_details.text_tokens > 0, "the prompt's tokens counted");
assert.ok(u.input_token_details.audio_tokens > 0, "user audio counted");
assert.ok(u.output_token_details.audio_tokens > 0, "assistant audio counted");
assert.ok(u.output_token_details.text_tokens > 0, "transcript tokens counted");
assert.equal(transcriptDeltas, transcriptDone.transcript, "transcript deltas join into the transcript");
out.turn1 = {
  transcript: tr.transcript, input_deltas: seen.filter((e) =>
    e.type === "conversation.item.input_audio_transcription.delta" && e.item_id === committed.item_id).length, audio_start_ms: started.audio_start_ms, audio_end_ms: stopped.audio_end_ms,
  status: done.response.status, audio_bytes: audioBytes, usage: u, assistant: transcriptDone.transcript,
};

// 4. Barge-in: a long answer, the user talks over it, the server cancels and clears.
const upd2 = next("session.updated", 15_000);
rt.send({ type: "session.update", session: { type: "realtime", max_output_tokens: 200 } });
await upd2;
const created2P = next("response.created", 90_000);
const delta2P = next("response.output_audio.delta", 90_000);
stream(speech);
stream(silence(1500));
const resp2 = await created2P;
const firstDelta = await delta2P;
const t0 = Date.now();
const clearedP = next("output_audio_buffer.cleared", 60_000);
const cancelledP = next("response.done", 60_000, (ev) => ev.response.id === resp2.response.id);
stream(speech);
const cleared = await clearedP;
const cancelled = await cancelledP;
assert.equal(cancelled.response.status, "cancelled");
assert.equal(cancelled.response.status_details.reason, "turn_detected");
const u2 = checkUsage(cancelled.response.usage, "barge-in");
assert.ok(u2.input_token_details.cached_tokens_details.text_tokens > 0, "the second response reads the first from the KV cache");
assert.equal(cleared.response_id, resp2.response.id);
// 5. The client truncates the item at what it played (as the agents SDKs do).
const played = Math.min(Date.now() - t0, cleared.audio_end_ms ?? 0);
const truncatedP = next("conversation.item.truncated", 15_000);
rt.send({ type: "conversation.item.truncate", item_id: firstDelta.item_id, content_index: 0, audio_end_ms: Math.floor(played) });
const truncated = await truncatedP;
assert.equal(truncated.item_id, firstDelta.item_id);
const retrievedP = next("conversation.item.retrieved", 15_000);
rt.send({ type: "conversation.item.retrieve", item_id: firstDelta.item_id });
const retrieved = await retrievedP;
assert.equal(retrieved.item.content[0].transcript, "", "truncation removes the transcript");
out.barge_in = { cleared_audio_end_ms: cleared.audio_end_ms, reason: cancelled.response.status_details.reason, truncated_ms: truncated.audio_end_ms, usage: u2 };

// A bad truncate is an error that names its param, and the session goes on.
const errP = new Promise((resolve) => rt.on("error", resolve));
rt.send({ type: "conversation.item.truncate", event_id: "bad_trunc", item_id: firstDelta.item_id, content_index: 3, audio_end_ms: 0 });
const err = await errP;
assert.equal(err.error.param, "content_index");
assert.equal(err.error.event_id, "bad_trunc");
out.bad_truncate = err.error.code;

// 6. An out-of-band response (conversation "none") with its own instructions and metadata:
// conversation_id null, metadata echoed, its item never added to the conversation.
await new Promise((resolve) => setTimeout(resolve, 2000)); // let the last speech's turn settle
const oobDoneP = next("response.done", 120_000, (ev) => ev.response.metadata?.purpose === "classify");
rt.send({ type: "response.cancel" }); // whatever the last speech started (an error when nothing)
rt.send({
  type: "response.create",
  response: { conversation: "none", output_modalities: ["text"], max_output_tokens: 8,
    instructions: "Name the topic in one word.", metadata: { purpose: "classify" } },
});
const oob = await oobDoneP;
assert.equal(oob.response.conversation_id, null);
assert.deepEqual(oob.response.metadata, { purpose: "classify" });
checkUsage(oob.response.usage, "out of band");
const oobItem = oob.response.output[0].id;
assert.ok(!seen.some((e) => e.type === "conversation.item.added" && e.item.id === oobItem), "out of band: no conversation item");
out.out_of_band = { status: oob.response.status, text: oob.response.output[0].content[0].text, conversation_id: oob.response.conversation_id, usage: oob.response.usage };

rt.close();
console.log(JSON.stringify(out));
process.exit(0);
