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

// 4. Seeds: the same seed gives the same answer; without one, temperature 1 samples.
const seeded = async (seed) => (await client.chat.completions.create({
  model, messages, max_tokens: 10, temperature: 1, ...(seed === undefined ? {} : { seed }),
})).choices[0].message.content;
const s1 = await seeded(42), s2 = await seeded(42);
assert.equal(s1, s2, "same seed, different answers");
const unseeded = new Set();
for (let i = 0; i < 4; i++) unseeded.add(await seeded(undefined));
assert.ok(unseeded.size > 1, "unseeded answers at temperature 1 were all the same");
out.seed = { same: s1 === s2, unseeded_distinct: unseeded.size };

// 5. response_format json_schema: the content parses and follows the schema.
const schema = {
  type: "object",
  properties: { answer: { type: "string", enum: ["yes", "no"] }, count: { type: "integer" } },
  required: ["answer", "count"], additionalProperties: false,
};
const js = await client.chat.completions.create({
  model, messages, max_tokens: 100, seed: 1,
  response_format: { type: "json_schema", json_schema: { name: "reply", strict: true, schema } },
});
const parsed = JSON.parse(js.choices[0].message.content);
assert.ok(["yes", "no"].includes(parsed.answer), js.choices[0].message.content);
assert.equal(typeof parsed.count, "number");
out.json_schema = parsed;

// 6. logprobs with top_logprobs, one entry per completion token.
const lp = await client.chat.completions.create({ model, messages, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 2 });
const entries = lp.choices[0].logprobs.content;
assert.equal(entries.length, lp.usage.completion_tokens);
for (const e of entries) {
  assert.ok(e.logprob <= 0 && Array.isArray(e.bytes) && e.top_logprobs.length === 2);
}
out.logprobs = { tokens: entries.length };

// 7. n = 2: two choices, indexed.
const two = await client.chat.completions.create({ model, messages, max_tokens: 4, n: 2, seed: 5 });
assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
out.n = { choices: two.choices.length };

// 8. Penalties and logit_bias in range are accepted.
await client.chat.completions.create({ model, messages, max_tokens: 4, presence_penalty: 1, frequency_penalty: -1, logit_bias: { "10": -100 } });

// 9. Multi-turn audio: the assistant's earlier audio, named by id.
const follow = await client.chat.completions.create({
  model, max_tokens: 4, messages: [...messages, { role: "assistant", audio: { id: audio.id } }, { role: "user", content: "And then?" }],
});
assert.ok(follow.choices[0].message.content.length > 0);
out.multi_turn_audio = { id: audio.id };

// 10. models.retrieve.
const m = await client.models.retrieve(model);
assert.equal(m.id, model);
assert.equal(m.object, "model");
out.model = m.id;
try {
  await client.models.retrieve("no-such-model");
  assert.fail("models.retrieve: no error");
} catch (e) {
  assert.ok(e instanceof OpenAI.NotFoundError, String(e));
  out.retrieve_unknown = { status: e.status };
}

// 10b. Tools: a forced call (non-streaming and streamed), the conversation going on from the
// tool's result, and a tool message without its call refused.
{
  const tools = [{
    type: "function",
    function: {
      name: "lookup_order",
      description: "Look up an order by its id",
      parameters: { type: "object", properties: { order_id: { type: "string" }, urgent: { type: "boolean" } }, required: ["order_id"] },
    },
  }];
  const ask = [{ role: "user", content: "Where is order 42?" }];
  const forced = await client.chat.completions.create({ model, messages: ask, tools, tool_choice: "required", max_tokens: 120 });
  const msg = forced.choices[0].message;
  assert.equal(forced.choices[0].finish_reason, "tool_calls");
  assert.equal(msg.content, null);
  assert.equal(msg.tool_calls.length, 1);
  const call = msg.tool_calls[0];
  assert.match(call.id, /^call_[0-9a-f]{24}$/);
  assert.equal(call.type, "function");
  assert.equal(call.function.name, "lookup_order");
  const args = JSON.parse(call.function.arguments);
  assert.equal(typeof args.order_id, "string");

  const st = await client.chat.completions.create({
    model, messages: ask, tools, tool_choice: { type: "function", function: { name: "lookup_order" } }, max_tokens: 120, stream: true,
  });
  const acc = {};
  let sfinish = null;
  for await (const ch of st) {
    for (const choice of ch.choices) {
      for (const d of choice.delta.tool_calls || []) {
        const a = (acc[d.index] ||= { id: "", name: "", args: "" });
        if (d.id) a.id = d.id;
        if (d.function?.name) a.name += d.function.name;
        if (d.function?.arguments) a.args += d.function.arguments;
      }
      if (choice.finish_reason) sfinish = choice.finish_reason;
    }
  }
  assert.equal(sfinish, "tool_calls");
  assert.deepEqual(Object.keys(acc), ["0"]);
  assert.equal(acc[0].name, "lookup_order");
  assert.equal(typeof JSON.parse(acc[0].args).order_id, "string");

  const follow = await client.chat.completions.create({
    model, tools, max_tokens: 8,
    messages: [...ask, msg, { role: "tool", tool_call_id: call.id, content: "shipped yesterday" }],
  });
  assert.equal(typeof follow.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(follow.choices[0].finish_reason));

  let orphan = null;
  try {
    await client.chat.completions.create({ model, tools, messages: [...ask, { role: "tool", tool_call_id: "call_none", content: "x" }] });
  } catch (e) {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    orphan = { status: e.status, param: e.param };
  }
  out.tools = { finish: forced.choices[0].finish_reason, name: call.function.name, stream_finish: sfinish,
    follow_finish: follow.choices[0].finish_reason, orphan };
}

// 11. Errors surface as the SDK's typed exceptions, naming the parameter.
for (const [name, body, status, param] of [
  ["unknown_model", { model: "no-such-model", messages }, 404, "model"],
  ["n9", { model, messages, n: 9 }, 400, "n"],
  ["presence_penalty", { model, messages, presence_penalty: 3 }, 400, "presence_penalty"],
  ["logit_bias", { model, messages, logit_bias: { "5": 500 } }, 400, "logit_bias"],
  ["audio_id", { model, messages: [{ role: "assistant", audio: { id: "audio_nope" } }, ...messages] }, 400, "messages[0].audio.id"],
  ["context_length", { model, messages: [{ role: "user", content: "sea ".repeat(100000) }] }, 400, "messages"],
]) {
  try {
    await client.chat.completions.create(body);
    assert.fail(`${name}: no error`);
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `${name}: ${e}`);
    assert.equal(e.status, status, name);
    assert.equal(e.param, param, name);
    assert.ok(e.error && typeof e.error.message === "string", `${name}: no message`);
    out[name] = { status: e.status, type: e.type, code: e.code, param: e.param };
  }
}
console.log(JSON.stringify(out));
