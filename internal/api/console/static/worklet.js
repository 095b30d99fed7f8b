// AudioWorklet processors of the omniserve console. Both run at the AudioContext's rate
// (`sampleRate`, a worklet global) and convert to and from the wire's 24 kHz pcm16.
"use strict";

const WIRE_RATE = 24000;

// omni-capture turns the microphone into 24 kHz mono Int16 chunks of `chunkMs` each, posted to
// the main thread as transferable ArrayBuffers.
class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const chunkMs = (options.processorOptions && options.processorOptions.chunkMs) || 40;
    this.step = sampleRate / WIRE_RATE; // input samples per output sample
    this.pos = 0; // fractional read position into the current render quantum
    this.chunkLen = Math.round(WIRE_RATE * chunkMs / 1000);
    this.chunk = new Int16Array(this.chunkLen);
    this.fill = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || input.length === 0 || !input[0]) return true;
    const ch = input[0];
    const n = ch.length;
    // Linear interpolation within the quantum (the last sample holds at its edge).
    while (this.pos < n) {
      const i = Math.floor(this.pos);
      const frac = this.pos - i;
      const a = ch[i];
      const b = i + 1 < n ? ch[i + 1] : ch[i];
      let v = a + (b - a) * frac;
      v = Math.max(-1, Math.min(1, v));
      this.chunk[this.fill++] = v < 0 ? v * 0x8000 : v * 0x7fff;
      if (this.fill === this.chunkLen) {
        // Transferred, so detached here: the next chunk is a new array.
        this.port.postMessage(this.chunk.buffer, [this.chunk.buffer]);
        this.chunk = new Int16Array(this.chunkLen);
        this.fill = 0;
      }
      this.pos += this.step;
    }
    this.pos -= n;
    return true;
  }
}

// omni-player is the jitter buffer and the speaker. Messages in:
//   {type:"push", samples: Int16Array (24 kHz)}  queue audio
//   {type:"end"}                                   the response is complete: play out what is left
//   {type:"flush", reason}                         drop everything now (barge-in)
// Messages out, every ~50 ms and after a flush:
//   {type:"stats", played, buffered, underruns, playing}  (counts in 24 kHz samples)
//   {type:"flushed", reason, dropped, buffered}
// Playback starts once `prebufferMs` is queued (or the response ended), and after an underrun
// waits for the prebuffer again, so network jitter becomes latency rather than clicks.
class PlayerProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const o = options.processorOptions || {};
    this.prebuffer = Math.round(WIRE_RATE * (o.prebufferMs || 120) / 1000);
    this.queue = []; // Float32Arrays at 24 kHz
    this.head = 0; // read offset into queue[0]
    this.buffered = 0;
    this.played = 0;
    this.underruns = 0;
    this.playing = false;
    this.ended = false;
    this.step = WIRE_RATE / sampleRate; // wire samples per output sample
    this.frac = 0;
    this.lastReport = 0;
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  onMessage(m) {
    if (m.type === "push") {
      const s = m.samples;
      const f = new Float32Array(s.length);
      for (let i = 0; i < s.length; i++) f[i] = s[i] / 0x8000;
      this.queue.push(f);
      this.buffered += f.length;
      this.ended = false;
    } else if (m.type === "end") {
      this.ended = true;
    } else if (m.type === "flush") {
      const dropped = this.buffered;
      this.queue = [];
      this.head = 0;
      this.buffered = 0;
      this.playing = false;
      this.ended = false;
      this.frac = 0;
      this.port.postMessage({ type: "flushed", reason: m.reason, dropped, buffered: this.buffered });
      this.report(true);
    }
  }

  // next returns the next wire sample, or undefined when the queue is empty.
  next() {
    while (this.queue.length > 0 && this.head >= this.queue[0].length) {
      this.queue.shift();
      this.head = 0;
    }
    if (this.queue.length === 0) return undefined;
    return this.queue[0][this.head];
  }

  advance() {
    this.head++;
    this.buffered--;
    this.played++;
  }

  report(force) {
    if (!force && currentTime - this.lastReport < 0.05) return;
    this.lastReport = currentTime;
    this.port.postMessage({ type: "stats", played: this.played, buffered: this.buffered, underruns: this.underruns, playing: this.playing });
  }

  process(_inputs, outputs) {
    const out = outputs[0];
    const ch0 = out[0];
    if (!this.playing && this.buffered > 0 && (this.buffered >= this.prebuffer || this.ended)) {
      this.playing = true;
    }
    for (let i = 0; i < ch0.length; i++) {
      let v = 0;
      if (this.playing) {
        const s = this.next();
        if (s === undefined) {
          this.playing = false;
          if (!this.ended) this.underruns++;
        } else {
          v = s;
          this.frac += this.step;
          while (this.frac >= 1 && this.next() !== undefined) {
            this.advance();
            this.frac -= 1;
          }
        }
      }
      for (let c = 0; c < out.length; c++) out[c][i] = v;
    }
    this.report(false);
    return true;
  }
}

registerProcessor("omni-capture", CaptureProcessor);
registerProcessor("omni-player", PlayerProcessor);
