// OpenAI Node SDK check of omniserve's /v1/audio endpoints.
// Usage: OMNISERVE_BASE_URL=http://127.0.0.1:PORT/v1 OMNISERVE_AUDIO_WAV=/path/goforward.wav node audio.mjs
// Prints one JSON line with what it observed and exits non-zero on the first mismatch.
import OpenAI from "openai";
import fs from "node:fs";
import assert from "node:assert/strict";

const client = new OpenAI({
  baseURL: process.env.OMNISERVE_BASE_URL,
  apiKey: process.env.OMNISERVE_API_KEY || "unused",
  maxRetries: 0,
  timeout: 60_000,
});
const wav = process.env.OMNISERVE_AUDIO_WAV;
const out = {};

// 1. Transcription, json (the SDK's default).
const tr = await client.audio.transcriptions.create({ file: fs.createReadStream(wav), model: "whisper-1" });
assert.equal(typeof tr.text, "string");
out.json = tr.text;

// 2. Transcription, text and verbose_json.
const txt = await client.audio.transcriptions.create({ file: fs.createReadStream(wav), model: "whisper-1", response_format: "text", language: "en" });
out.text = String(txt).trim();
const vj = await client.audio.transcriptions.create({ file: fs.createReadStream(wav), model: "whisper-1", response_format: "verbose_json" });
assert.ok(vj.duration > 0, "verbose_json duration");
assert.equal(vj.segments.length, 1);
out.verbose = { text: vj.text, duration: vj.duration };

// 3. Speech, pcm, read as a stream.
const sp = await client.audio.speech.create({ model: "tts-1", voice: "alloy", input: "Hello there. This is omniserve speaking.", response_format: "pcm" });
assert.equal(sp.headers.get("content-type"), "audio/pcm");
let bytes = 0, chunks = 0;
for await (const chunk of sp.body) { bytes += chunk.length; chunks++; }
out.pcm = { bytes, chunks };

// 4. Speech, wav.
const sw = await client.audio.speech.create({ model: "tts-1", voice: "alloy", input: "Go forward ten meters.", response_format: "wav" });
const wb = Buffer.from(await sw.arrayBuffer());
assert.equal(wb.subarray(0, 4).toString(), "RIFF");
out.wav = { bytes: wb.length };

// 5. Typed errors.
try {
  await client.audio.speech.create({ model: "tts-1", voice: "alloy", input: "hi", response_format: "mp3" });
  assert.fail("mp3 accepted");
} catch (e) {
  assert.ok(e instanceof OpenAI.BadRequestError, String(e));
  out.mp3 = { status: e.status, param: e.param };
}
try {
  await client.audio.transcriptions.create({ file: fs.createReadStream(wav), model: "whisper-1", language: "fr" });
  assert.fail("fr accepted");
} catch (e) {
  assert.ok(e instanceof OpenAI.BadRequestError, String(e));
  out.fr = { status: e.status, param: e.param };
}

// 6. Streamed transcription (gpt-4o-transcribe style): deltas, then done with the full text.
const st = await client.audio.transcriptions.create({ file: fs.createReadStream(wav), model: "gpt-4o-transcribe", stream: true });
const events = [];
let joined = "";
for await (const ev of st) {
  events.push(ev.type);
  if (ev.type === "transcript.text.delta") joined += ev.delta;
  if (ev.type === "transcript.text.done") out.streamDone = ev.text;
}
out.stream = { events, joined };
// 7. include: ["logprobs"] (the SDK sends include[]=logprobs): per-word tokens in the JSON
// answer, and in the stream's last delta and its done event.
const lj = await client.audio.transcriptions.create({ file: fs.createReadStream(wav), model: "gpt-4o-transcribe", include: ["logprobs"] });
out.logprobsJSON = { text: lj.text, logprobs: lj.logprobs };
const ls = await client.audio.transcriptions.create({ file: fs.createReadStream(wav), model: "gpt-4o-transcribe", stream: true, include: ["logprobs"] });
out.logprobsStream = { deltas: [] };
for await (const ev of ls) {
  if (ev.type === "transcript.text.delta") out.logprobsStream.deltas.push({ delta: ev.delta, logprobs: ev.logprobs ?? null });
  if (ev.type === "transcript.text.done") { out.logprobsStream.text = ev.text; out.logprobsStream.logprobs = ev.logprobs; }
}
try {
  await client.audio.transcriptions.create({ file: fs.createReadStream(wav), model: "gpt-4o-transcribe", response_format: "verbose_json", include: ["logprobs"] });
  assert.fail("include logprobs accepted with verbose_json");
} catch (e) {
  assert.ok(e instanceof OpenAI.BadRequestError, String(e));
  out.logprobs = { status: e.status, param: e.param };
}
console.log(JSON.stringify(out));
