// OpenAI Node SDK compatibility check against a running omniserve server.
// Usage: OMNISERVE_BASE_URL=http://127.0.0.1:PORT/v1 OMNISERVE_MODEL=dummy:tiny node compat.mjs
// Prints one JSON line with what it observed and exits non-zero on the first mismatch.
import OpenAI from "openai";
import assert from "node:assert/strict";

const client = new OpenAI({
  baseURL: process.env.OMNISERVE_BASE_URL,
  apiKey: process.env.OMNISERVE_API_KEY || "unused",
  maxRetries: 0,
  timeout: 60_000,
});
const model = process.env.OMNISERVE_MODEL;
const messages = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Say something about the weather." },
];
const out = {};

// 1. Non-streaming text.
const c = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0.7, seed: 7 });
assert.match(c.id, /^chatcmpl-[0-9a-f]{16}$/);
assert.equal(c.object, "chat.completion");
assert.equal(c.model, model);
assert.equal(c.choices.length, 1);
assert.equal(c.choices[0].message.role, "assistant");
assert.equal(typeof c.choices[0].message.content, "string");
assert.ok(c.choices[0].message.content.length > 0, "empty content");
assert.ok(["stop", "length"].includes(c.choices[0].finish_reason), c.choices[0].finish_reason);
assert.ok(c.usage.prompt_tokens > 0 && c.usage.completion_tokens > 0);
assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens);
out.nonstream = { content: c.choices[0].message.content, finish: c.choices[0].finish_reason, usage: c.usage };

// 2. Streaming text with a final usage chunk.
const stream = await client.chat.completions.create({
  model, messages, max_tokens: 12, stream: true, stream_options: { include_usage: true },
});
let text = "", chunks = 0, finish = null, usage = null, role = null;
for await (const ch of stream) {
  assert.equal(ch.object, "chat.completion.chunk");
  chunks++;
  if (ch.usage) usage = ch.usage;
  for (const choice of ch.choices) {
    if (choice.delta.role) role = choice.delta.role;
    if (choice.delta.content) text += choice.delta.content;
    if (choice.finish_reason) finish = choice.finish_reason;
  }
}
assert.equal(role, "assistant");
assert.ok(text.length > 0, "streamed no text");
assert.ok(["stop", "length"].includes(finish), String(finish));
assert.ok(usage && usage.completion_tokens > 0, "no usage chunk");
out.stream = { text, chunks, finish, usage };

// 3. Non-streaming text + audio (WAV).
const a = await client.chat.completions.create({
  model, messages, max_tokens: 8, modalities: ["text", "audio"], audio: { voice: "alloy", format: "wav" },
});
const audio = a.choices[0].message.audio;
assert.ok(audio && audio.data && audio.id, "no audio");
const wav = Buffer.from(audio.data, "base64");
assert.equal(wav.subarray(0, 4).toString("ascii"), "RIFF");
assert.equal(wav.readUInt32LE(24), 24000, "sample rate");
out.audio = { bytes: wav.length, transcript: audio.transcript };

// 4. Errors surface as the SDK's typed exceptions.
for (const [name, body, status] of [
  ["unknown_model", { model: "no-such-model", messages }, 404],
  ["n2", { model, messages, n: 2 }, 400],
]) {
  try {
    await client.chat.completions.create(body);
    assert.fail(`${name}: no error`);
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `${name}: ${e}`);
    assert.equal(e.status, status, name);
    assert.ok(e.error && typeof e.error.message === "string", `${name}: no message`);
    out[name] = { status: e.status, type: e.type, code: e.code };
  }
}
console.log(JSON.stringify(out));
