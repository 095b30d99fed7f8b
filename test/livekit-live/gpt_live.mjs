// Drives LiveKit's GPT-Live model (@livekit/agents-plugin-openai 1.9.0, GPTLiveModel) directly,
// as LiveKit's AgentSession drives a DuplexModel, but with no LiveKit server or room: the
// session is configured (_updateSession), fed microphone frames (pushAudio: 16 kHz frames of
// real speech, which the plugin resamples to 24 kHz and sends in 100 ms chunks), its audio
// stream and events are read, the input is muted and unmuted, context is appended, and it is
// closed. Only the API key and the base URL point it at omniserve. Prints one JSON line.
//
// OMNISERVE_DELEGATION=responses runs the plugin's default instead, Responses delegation, with a
// LiveKit tool (llm.tool, a zod schema) forced: on a server with --live-test-hooks the user's
// turn is delegated, the plugin's function_call is answered as AgentSession answers it
// (_appendItems with the FunctionCallOutput: response.item.create, then response.create once
// the backend's response completed), and the task's text is spoken.
//
// Env: OMNISERVE_BASE_URL (http://host:port/v1), OMNISERVE_API_KEY, OMNISERVE_SPEECH (raw
// 16 kHz mono PCM16), OMNISERVE_DELEGATION (client, the default here, or responses).
import fs from "node:fs";
import { initializeLogger, llm } from "@livekit/agents";
import { AudioFrame } from "@livekit/rtc-node";
import { realtime } from "@livekit/agents-plugin-openai";
import { z } from "zod";

initializeLogger({ pretty: false, level: "warn" });

const out = { errors: [], events: {}, input_transcript: "", input_final: false, output_transcript: "",
  audio_samples: 0, audio_samples_after_bargein: 0, speech_started: 0, speech_stopped: 0, acks: {}, usage_s: [], closed: null };
const responses = process.env.OMNISERVE_DELEGATION === "responses";
out.delegations = []; out.function_calls = []; out.task_events = [];
const model = new realtime.GPTLiveModel({
  apiKey: process.env.OMNISERVE_API_KEY,
  baseURL: process.env.OMNISERVE_BASE_URL,
  delegation: responses ? "responses" : "client",
  responsesOptions: responses ? { toolChoice: { type: "function", function: { name: "getWeather" } }, maxOutputTokens: 200 } : undefined,
  connOptions: { maxRetry: 0, retryIntervalMs: 100, timeoutMs: 10000 },
});
const session = model.session();
const weather = llm.tool({
  name: "getWeather",
  description: "Get the weather.",
  parameters: z.object({ location: z.string() }),
  execute: async () => "rainy",
});
session.on("openai_server_event_received", (e) => {
  out.events[e.type] = (out.events[e.type] || 0) + 1;
  if (e.type.endsWith(".appended")) out.acks[e.type] = [e.start_ms, e.end_ms];
  if (e.type === "session.usage.updated") out.usage_s.push(e.usage?.seconds);
  if (e.type === "session.closed") out.closed = { reason: e.reason, usage: e.usage };
  if (e.type === "error") out.errors.push(JSON.stringify(e.error));
  if (e.type === "session.delegation.created") out.delegations.push(e.delegation);
  if (e.type === "response.event") out.task_events.push(e.event?.type);
});
session.on("function_call", (call) => {
  out.function_calls.push({ name: call.name, args: call.args });
  // What AgentSession does with a tool's result: hand the output back to the session.
  session._appendItems([new llm.FunctionCallOutput({ callId: call.callId, name: call.name, output: "rainy", isError: false })]);
});
session.on("error", (e) => out.errors.push(String(e.error?.message ?? e)));
session.on("input_speech_started", () => out.speech_started++);
session.on("input_speech_stopped", () => out.speech_stopped++);
session.on("input_audio_transcription_completed", (e) => {
  out.input_transcript = e.transcript;
  if (e.isFinal) out.input_final = true;
});
session.on("transcript_delta", (e) => { out.output_transcript += e.text; });

if (responses) {
  await session._updateSession("Look the weather up. [[omniserve-test:delegate]]", llm.ChatContext.empty(), new llm.ToolContext([weather]));
} else {
  await session._updateSession("Be brief.", llm.ChatContext.empty(), new llm.ToolContext([]));
}

let bargedIn = false;
const reading = (async () => {
  for await (const f of session.audioStream) {
    const frame = f.frame ?? f;
    const n = frame.samplesPerChannel ?? 0;
    const pcm = frame.data ?? [];
    let loud = false;
    for (let i = 0; i < pcm.length; i++) if (Math.abs(pcm[i]) > 64) { loud = true; break; }
    if (!loud) continue;
    out.audio_samples += n;
    if (bargedIn) out.audio_samples_after_bargein += n;
  }
})();

const raw = fs.readFileSync(process.env.OMNISERVE_SPEECH);
const speech = new Int16Array(raw.buffer, raw.byteOffset, raw.length >> 1);
const rate = 16000;
const step = rate / 10; // 100 ms, as a microphone track delivers it
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const say = async (pcm) => {
  for (let i = 0; i < pcm.length; i += step) {
    const chunk = pcm.slice(i, i + step);
    session.pushAudio(new AudioFrame(chunk, rate, 1, chunk.length));
    await sleep(100);
  }
};
const silence = (ms) => new Int16Array((rate * ms) / 1000);
const until = async (cond, ms) => { const end = Date.now() + ms; while (!cond() && Date.now() < end) await say(silence(100)); return cond(); };

await say(silence(500));
await say(speech);
if (responses) {
  // The task: a forced call, answered; the task's text is then spoken as commentary.
  const done = () => out.task_events.filter((t) => t === "response.completed").length >= 2;
  if (!(await until(done, 30000))) out.errors.push("the delegated task did not complete twice (the call, then its answer)");
  const heard = out.audio_samples;
  out.transcript_before_result = out.output_transcript;
  if (!(await until(() => out.audio_samples > heard + 24000 / 2, 20000))) out.errors.push("the task's result was not spoken");
  await session.close();
  await reading;
  console.log(JSON.stringify(out));
  process.exit(0);
}
if (!(await until(() => out.audio_samples > 24000 * 0.5, 15000))) out.errors.push("no reply audio within 15 s of the speech's end");

// The speech again, over the reply: the user barges in. The reply's audio stops (GPT-Live has no
// clear: the track goes silent), and the interruption is heard as the user's second turn.
const beforeBarge = out.audio_samples;
const bargeAt = Date.now();
bargedIn = true;
await say(speech);
out.reply_audio_while_user_spoke_s = (out.audio_samples - beforeBarge) / 24000;
out.user_spoke_s = (Date.now() - bargeAt) / 1000;

session.muteInput();
await say(silence(300));
session.unmuteInput();
session.appendInstructions("Answer in one sentence.");
session.appendThinking("The user is testing the connection.");
await until(() => out.events["session.thinking.appended"] > 0 && out.events["session.instructions.appended"] > 0, 5000);
await until(() => (out.usage_s.length > 0), 20000);
await session.close();
await reading;
console.log(JSON.stringify(out));
process.exit(0);
