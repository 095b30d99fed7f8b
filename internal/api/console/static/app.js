// omniserve console: a Realtime (OpenAI GA events) client in one file, no build step.
//
// window.omni.stats holds the page's own counters (connection, microphone, playback, flushes,
// turns); the browser test reads them, and so can anyone from the devtools console.
"use strict";

(() => {
  const WIRE_RATE = 24000;
  const CHUNK_MS = 40;
  const PREBUFFER_MS = 120;
  const MAX_LOG = 1000;
  // Error codes that are races of barge-in, not failures (OpenAI Realtime clients tolerate them).
  // On ?duplex=1 (vllm-omni's dialect) the same races carry vllm-omni's codes.
  const RACE_CODES = new Set(["response_cancel_not_active", "response_not_active",
    "conversation_already_has_active_response", "response_already_active", "item_truncate_invalid_item_id",
    "item_not_found", "input_audio_buffer_commit_empty", "input_audio_buffer_empty"]);

  const $ = (id) => document.getElementById(id);

  const stats = {
    status: "idle", sessionReady: false, sessionId: "", connects: 0, reconnects: 0, resumes: 0,
    micActive: false, chunksSent: 0, samplesSent: 0,
    audioDeltas: 0, samplesReceived: 0, samplesPlayed: 0, bufferedSamples: 0, underruns: 0, playing: false,
    flushes: [], userTranscripts: [], assistantTranscripts: [], turns: [], errors: [],
    transport: "", rtp: { packets: 0, energy: 0 },
  };

  let ws = null;
  // rtc is the WebRTC call when the session runs over one (the console's default where the
  // browser has RTCPeerConnection): {pc, dc, stream, audioEl, timer}. The microphone is its
  // track (the browser's echo cancellation on) and the reply plays from its remote track; the
  // events flow on the "oai-events" data channel.
  let rtc = null;
  let pttStartAt = 0;
  let userClosed = true;
  let retry = 0;
  let retryTimer = 0;
  let mode = "handsfree";
  let audio = null; // {ctx, player, capture}
  let mic = null; // {stream, source}
  let pttHeld = false;
  let pttSamples = 0;
  let pushedSinceReport = 0;
  const responses = new Map(); // response id → turn record
  let active = null; // the response in progress
  let playingItem = null; // {id, start (samples played when it starts), received (samples)}
  let inputEnd = 0; // performance.now() at the end of the user's last turn
  const dropped = new Set(); // responses whose audio was flushed: late deltas are ignored
  const userItems = new Map(); // item id → its bubble while its transcript streams
  let retriedWithoutExtension = false;
  // The session's resume state (omniserve's extension, docs/REALTIME.md "Resuming a session"):
  // {sessionId, token, lastSeq} once session.created carried a token, else null.
  let resumable = null;
  let resumeTries = 0;
  const RESUME_TRIES = 5;

  // ---- status and rendering ------------------------------------------------------------------

  function setStatus(state, text) {
    stats.status = state;
    const el = $("status");
    el.dataset.state = state;
    el.textContent = text || state;
    const connected = state === "ready" || state === "connecting";
    $("connect").disabled = connected || state === "reconnecting";
    $("disconnect").disabled = state === "idle" || state === "error";
    $("talk").disabled = !(state === "ready" && mode === "ptt");
    $("talk").hidden = mode !== "ptt";
  }

  function bubble(cls, who, text) {
    const li = document.createElement("li");
    li.className = cls;
    const w = document.createElement("span");
    w.className = "who";
    w.textContent = who;
    const t = document.createElement("span");
    t.className = "text";
    t.textContent = text || "";
    li.append(w, t);
    const list = $("transcript");
    list.append(li);
    list.scrollTop = list.scrollHeight;
    return li;
  }

  function showError(err) {
    const race = RACE_CODES.has(err.code);
    stats.errors.push(err);
    const li = bubble("error" + (race ? " race" : ""), "error" + (err.code ? " · " + err.code : ""), err.message || "error");
    li.setAttribute("role", "alert");
  }

  function note(text) {
    bubble("note", "", text);
  }

  // NOISY events arrive every few tens of milliseconds; the log hides them unless asked.
  const NOISY = /^(input_audio_buffer\.append|response\.(output_)?audio\.delta|response\.listen)$/;
  const t0 = performance.now();

  function logEvent(dir, ev) {
    const li = document.createElement("li");
    li.className = dir + (ev.type === "error" ? " error" : "");
    li.dataset.type = ev.type || "";
    // An empty delta (a transcript delta with no text yet) says nothing: it goes with the noisy.
    li.dataset.empty = ev.delta === "" ? "1" : "";
    const rest = { ...ev };
    delete rest.type;
    delete rest.event_id;
    delete rest.server_event_seq;
    if (typeof rest.delta === "string" && rest.delta.length > 64 && /audio\.delta$/.test(ev.type)) rest.delta = `<${rest.delta.length} base64 chars>`;
    if (typeof rest.audio === "string") rest.audio = `<${rest.audio.length} base64 chars>`;
    const at = document.createElement("span");
    at.className = "at";
    at.textContent = ((performance.now() - t0) / 1000).toFixed(2);
    const t = document.createElement("span");
    t.className = "t";
    t.textContent = ev.type || "(no type)";
    li.append(at, t, JSON.stringify(rest));
    applyFilter(li);
    const log = $("log");
    const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.append(li);
    while (log.childElementCount > MAX_LOG) log.firstElementChild.remove();
    if (atBottom) log.scrollTop = log.scrollHeight;
  }

  function applyFilter(li) {
    const f = $("filter").value.trim().toLowerCase();
    const hideNoisy = $("hide-audio").checked;
    li.hidden = (hideNoisy && (NOISY.test(li.dataset.type) || li.dataset.empty === "1")) || (f !== "" && !li.textContent.toLowerCase().includes(f));
  }

  function refilter() {
    for (const li of $("log").children) applyFilter(li);
  }

  function ms(v) {
    return v === undefined || v === null ? "–" : `${Math.round(v)} ms`;
  }

  function renderTurn(t) {
    const tbody = $("turns").tBodies[0];
    let row = tbody.querySelector(`tr[data-id="${CSS.escape(t.id)}"]`);
    if (!row) {
      row = document.createElement("tr");
      row.dataset.id = t.id;
      tbody.prepend(row);
    }
    const cells = [String(t.n), ms(t.firstAudioMs), ms(t.doneMs), `${(t.audioMs / 1000).toFixed(2)} s`, t.reason ? `${t.status} (${t.reason})` : (t.status || "…")];
    row.replaceChildren(...cells.map((c) => { const td = document.createElement("td"); td.textContent = c; return td; }));
  }

  function updatePlaying() {
    $("playing").textContent = `${(stats.bufferedSamples / WIRE_RATE).toFixed(1)} s buffered`;
  }

  // ---- audio ---------------------------------------------------------------------------------

  async function ensureAudio() {
    if (audio) {
      if (audio.ctx.state === "suspended") await audio.ctx.resume();
      return audio;
    }
    let ctx;
    try {
      ctx = new AudioContext({ sampleRate: WIRE_RATE, latencyHint: "interactive" });
    } catch (_) {
      ctx = new AudioContext({ latencyHint: "interactive" }); // the worklets resample
    }
    await ctx.audioWorklet.addModule("/console/worklet.js");
    const player = new AudioWorkletNode(ctx, "omni-player", { numberOfInputs: 0, outputChannelCount: [1], processorOptions: { prebufferMs: PREBUFFER_MS } });
    player.connect(ctx.destination);
    player.port.onmessage = (e) => onPlayer(e.data);
    if (ctx.state === "suspended") await ctx.resume();
    audio = { ctx, player };
    return audio;
  }

  function onPlayer(m) {
    if (m.type === "stats") {
      stats.samplesPlayed = m.played;
      stats.bufferedSamples = m.buffered;
      stats.underruns = m.underruns;
      stats.playing = m.playing;
      pushedSinceReport = 0;
      updatePlaying();
    } else if (m.type === "flushed") {
      stats.flushes.push({ reason: m.reason, dropped: m.dropped, bufferedAfter: m.buffered, at: Date.now() });
    }
  }

  function flush(reason) {
    if (!audio) return;
    audio.player.port.postMessage({ type: "flush", reason });
    pushedSinceReport = 0;
  }

  function playDelta(ev) {
    if (dropped.has(ev.response_id)) return;
    const b = atob(ev.delta);
    const s = new Int16Array(b.length >> 1);
    for (let i = 0; i < s.length; i++) s[i] = (b.charCodeAt(2 * i) | (b.charCodeAt(2 * i + 1) << 8)) << 16 >> 16;
    stats.audioDeltas++;
    stats.samplesReceived += s.length;
    const t = responses.get(ev.response_id);
    if (t) {
      if (t.firstAudioAt === undefined) {
        t.firstAudioAt = performance.now();
        if (t.inputEnd) t.firstAudioMs = t.firstAudioAt - t.inputEnd;
        renderTurn(t);
      }
      t.audioMs += s.length * 1000 / WIRE_RATE;
    }
    if (!playingItem || playingItem.id !== ev.item_id) {
      playingItem = { id: ev.item_id, start: stats.samplesPlayed + stats.bufferedSamples + pushedSinceReport, received: 0 };
    }
    playingItem.received += s.length;
    pushedSinceReport += s.length;
    if (audio) audio.player.port.postMessage({ type: "push", samples: s }, [s.buffer]);
  }

  // rtcPlaying: response id → its turn while the call's audio of it plays (WebRTC only).
  const rtcPlaying = new Map();

  function rtcAudioStarted(id) {
    const t = responses.get(id);
    if (!t || t.firstAudioAt !== undefined) return;
    t.firstAudioAt = performance.now();
    if (t.inputEnd) t.firstAudioMs = t.firstAudioAt - t.inputEnd;
    rtcPlaying.set(id, t);
    renderTurn(t);
  }

  // rtcAudioStopped closes the turn's audio time; the turn may already be done (its audio
  // plays out after its last token), so its entry in stats.turns is updated too.
  function rtcAudioStopped(id) {
    const t = rtcPlaying.get(id);
    if (!t) return;
    rtcPlaying.delete(id);
    t.audioMs = performance.now() - t.firstAudioAt;
    const done = stats.turns.find((x) => x.id === id);
    if (done) {
      done.firstAudioMs = t.firstAudioMs;
      done.audioMs = t.audioMs;
    }
    renderTurn(t);
  }

  // bargeIn stops local playback at once and tells the server what was heard of the item.
  function bargeIn(reason) {
    const hadAudio = stats.bufferedSamples + pushedSinceReport > 0 || stats.playing;
    if (active) dropped.add(active.id);
    flush(reason);
    if (playingItem && hadAudio) {
      const heard = Math.max(0, Math.min(stats.samplesPlayed - playingItem.start, playingItem.received));
      if (heard < playingItem.received) {
        send({ type: "conversation.item.truncate", item_id: playingItem.id, content_index: 0, audio_end_ms: Math.floor(heard * 1000 / WIRE_RATE) });
      }
    }
    playingItem = null;
  }

  async function startMic() {
    if (rtc) { // the call's track is the microphone; push-to-talk enables it while held
      for (const tr of rtc.stream.getAudioTracks()) tr.enabled = mode !== "ptt" || pttHeld;
      stats.micActive = true;
      $("mic").textContent = mode === "ptt" ? "ready (hold to talk)" : "on";
      $("mic").dataset.on = "true";
      return;
    }
    if (mic) return;
    const a = await ensureAudio();
    const stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true } });
    if (!ws || userClosed || rtc) { // disconnected (or moved to a call) while the permission prompt was open
      for (const tr of stream.getTracks()) tr.stop();
      return;
    }
    const source = a.ctx.createMediaStreamSource(stream);
    const capture = new AudioWorkletNode(a.ctx, "omni-capture", { numberOfOutputs: 0, processorOptions: { chunkMs: CHUNK_MS } });
    capture.port.onmessage = (e) => onMicChunk(new Int16Array(e.data));
    source.connect(capture);
    mic = { stream, source, capture };
    stats.micActive = true;
    $("mic").textContent = mode === "ptt" ? "ready (hold to talk)" : "on";
    $("mic").dataset.on = "true";
  }

  function stopMic() {
    if (rtc) {
      stats.micActive = false;
      $("mic").textContent = "off";
      $("mic").dataset.on = "false";
    }
    if (!mic) return;
    for (const tr of mic.stream.getTracks()) tr.stop();
    mic.source.disconnect();
    mic.capture.port.onmessage = null;
    mic.capture.disconnect();
    mic = null;
    stats.micActive = false;
    $("mic").textContent = "off";
    $("mic").dataset.on = "false";
  }

  function onMicChunk(s) {
    if (!stats.sessionReady || !ws || ws.readyState !== WebSocket.OPEN) return;
    if (mode === "ptt" && !pttHeld) return;
    let bin = "";
    const bytes = new Uint8Array(s.buffer);
    for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    send({ type: "input_audio_buffer.append", audio: btoa(bin) }, true);
    stats.chunksSent++;
    stats.samplesSent += s.length;
    if (pttHeld) pttSamples += s.length;
  }

  // ---- push-to-talk --------------------------------------------------------------------------

  function pttDown() {
    if (pttHeld || mode !== "ptt" || !stats.sessionReady) return;
    pttHeld = true;
    pttSamples = 0;
    pttStartAt = performance.now();
    if (rtc) for (const tr of rtc.stream.getAudioTracks()) tr.enabled = true;
    $("talk").setAttribute("aria-pressed", "true");
    $("talk").textContent = "Listening… release to send";
    // Talking over the assistant interrupts it, as server VAD would.
    if (active) send({ type: "response.cancel" });
    bargeIn("push_to_talk");
  }

  function pttUp() {
    if (!pttHeld) return;
    pttHeld = false;
    $("talk").setAttribute("aria-pressed", "false");
    $("talk").textContent = "Hold to talk";
    if (rtc) for (const tr of rtc.stream.getAudioTracks()) tr.enabled = false;
    const heldMs = rtc ? performance.now() - pttStartAt : pttSamples * 1000 / WIRE_RATE;
    if (heldMs < 100) { // under 100 ms: nothing worth a turn
      send({ type: "input_audio_buffer.clear" });
      note("too short: hold the button while you speak");
      return;
    }
    send({ type: "input_audio_buffer.commit" });
    inputEnd = performance.now();
    send({ type: "response.create" });
  }

  // ---- protocol ------------------------------------------------------------------------------

  function send(ev, quiet) {
    const open = rtc ? rtc.dc.readyState === "open" : ws && ws.readyState === WebSocket.OPEN;
    if (!open) return false;
    ev.event_id = "evt_console_" + Math.random().toString(36).slice(2, 10);
    (rtc ? rtc.dc : ws).send(JSON.stringify(ev));
    if (!quiet || !$("hide-audio").checked) logEvent("out", ev);
    return true;
  }

  function sessionConfig() {
    const format = { type: "audio/pcm", rate: WIRE_RATE };
    const handsFree = mode === "handsfree";
    const s = {
      type: "realtime",
      output_modalities: ["audio"],
      audio: {
        input: {
          format,
          turn_detection: handsFree ? { type: "server_vad", threshold: 0.5, prefix_padding_ms: 300, silence_duration_ms: 500, create_response: true, interrupt_response: true } : null,
        },
        output: { format },
      },
    };
    // Today's server answers VAD turns on its full-duplex endpoint with this extension.
    if (handsFree) s.extra_body = { auto_response: true };
    return s;
  }

  function endpoint() {
    const u = new URL($("url").value.trim(), location.href);
    if (u.protocol === "http:") u.protocol = "ws:";
    if (u.protocol === "https:") u.protocol = "wss:";
    if (mode === "handsfree" && !u.searchParams.has("duplex")) u.searchParams.set("duplex", "1");
    return u;
  }

  // probe asks the same server over plain HTTP whether the key works: a browser hides why a
  // WebSocket handshake failed, and a 401 should not be retried.
  async function probe(u, key) {
    if (u.host !== location.host) return null;
    try {
      const headers = key ? { Authorization: "Bearer " + key } : {};
      const r = await fetch(`${location.protocol}//${u.host}/v1/models`, { headers, cache: "no-store" });
      if (r.status === 401) {
        let msg = "the API key was rejected";
        try { msg = (await r.json()).error.message || msg; } catch (_) { /* keep the default */ }
        return { code: "invalid_api_key", message: msg };
      }
    } catch (_) {
      // unreachable: the WebSocket attempt will say so and back off
    }
    return null;
  }

  async function connect() {
    clearTimeout(retryTimer);
    userClosed = false;
    // A connect may replace a socket whose close event has not run yet: start clean.
    stopMic();
    closeRTC();
    stats.sessionReady = false;
    active = null;
    playingItem = null;
    retriedWithoutExtension = false;
    mode = document.querySelector('input[name="mode"]:checked').value;
    setStatus("connecting", "connecting…");
    let u;
    try {
      u = endpoint();
      await ensureAudio();
    } catch (e) {
      showError({ code: "client", message: String(e && e.message || e) });
      userClosed = true;
      setStatus("error", "error");
      return;
    }
    const key = $("apikey").value.trim();
    const refused = await probe(u, key);
    if (userClosed) return;
    if (refused) {
      showError(refused);
      userClosed = true;
      setStatus("error", "API key rejected");
      return;
    }
    if (document.querySelector('input[name="transport"]:checked').value === "auto" && window.RTCPeerConnection) {
      try {
        await connectRTC(u, key);
        return;
      } catch (e) {
        closeRTC();
        if (userClosed) return;
        note(`WebRTC unavailable (${e && e.message || e}); using the WebSocket`);
      }
    }
    setTransport("websocket");
    const protocols = ["realtime"];
    if (key) protocols.push("openai-insecure-api-key." + key);
    const sock = new WebSocket(u.href, protocols);
    ws = sock;
    stats.connects++;
    let opened = false;
    sock.onopen = () => {
      opened = true;
      // session.update at once: servers that send session.created first and servers that wait
      // for the update both answer with session.updated.
      send({ type: "session.update", session: sessionConfig() });
    };
    sock.onmessage = (e) => onMessage(sock, e);
    sock.onclose = (e) => {
      if (sock !== ws) return;
      onClosed(opened, e);
    };
  }

  function setTransport(kind) {
    stats.transport = kind;
    $("transport").textContent = kind === "webrtc" ? "WebRTC (echo cancellation on)" : kind === "websocket" ? "WebSocket" : "–";
  }

  // connectRTC opens the session as a WebRTC call, as OpenAI's WebRTC guide does: a client
  // secret minted for the session (this page is the app and holds the key the user typed), the
  // SDP offer to /v1/realtime/calls with it, the microphone as the call's track. It throws when
  // any step fails, and connect falls back to the WebSocket.
  async function connectRTC(u, key) {
    const base = `${u.protocol === "wss:" ? "https:" : "http:"}//${u.host}`;
    const cfg = sessionConfig();
    delete cfg.extra_body; // a call runs the GA session: server VAD answers by itself
    const headers = { "Content-Type": "application/json" };
    if (key) headers.Authorization = "Bearer " + key;
    const minted = await fetch(base + "/v1/realtime/client_secrets", { method: "POST", headers, body: JSON.stringify({ session: cfg }) });
    if (!minted.ok) throw new Error(`client secret: HTTP ${minted.status}`);
    const secret = (await minted.json()).value;
    const stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true } });
    const pc = new RTCPeerConnection();
    const link = { pc, dc: null, stream, audioEl: new Audio(), timer: 0 };
    rtc = link;
    link.audioEl.autoplay = true;
    pc.ontrack = (e) => { link.audioEl.srcObject = e.streams[0]; };
    for (const tr of stream.getAudioTracks()) {
      tr.enabled = mode !== "ptt";
      pc.addTrack(tr, stream);
    }
    const dc = pc.createDataChannel("oai-events");
    link.dc = dc;
    const opened = new Promise((resolve, reject) => {
      dc.onopen = resolve;
      setTimeout(() => reject(new Error("the call did not connect within 10 s")), 10000);
    });
    dc.onmessage = (e) => {
      if (rtc !== link) return;
      let ev;
      try { ev = JSON.parse(e.data); } catch (_) { return; }
      onEvent(ev);
    };
    const offer = await pc.createOffer();
    await pc.setLocalDescription(offer);
    const r = await fetch(base + "/v1/realtime/calls", { method: "POST", body: offer.sdp,
      headers: { Authorization: "Bearer " + secret, "Content-Type": "application/sdp" } });
    const answer = await r.text();
    if (r.status !== 201) throw new Error(`POST /v1/realtime/calls: HTTP ${r.status}`);
    await pc.setRemoteDescription({ type: "answer", sdp: answer });
    await opened;
    if (rtc !== link) throw new Error("disconnected");
    stats.connects++;
    setTransport("webrtc");
    dc.onclose = () => { if (rtc === link) onRTCClosed(); };
    pc.onconnectionstatechange = () => {
      if (rtc === link && (pc.connectionState === "failed" || pc.connectionState === "closed")) onRTCClosed();
    };
    link.timer = setInterval(async () => { // what the call's audio brought in (the page's own measure)
      if (rtc !== link) return;
      (await pc.getStats()).forEach((st) => {
        if (st.type === "inbound-rtp" && st.kind === "audio") {
          stats.rtp = { packets: st.packetsReceived || 0, energy: st.totalAudioEnergy || 0 };
        }
      });
    }, 500);
    send({ type: "session.update", session: cfg });
  }

  function closeRTC() {
    const link = rtc;
    if (!link) return;
    rtc = null;
    clearInterval(link.timer);
    for (const tr of link.stream ? link.stream.getTracks() : []) tr.stop();
    link.audioEl.srcObject = null;
    link.pc.close();
  }

  // onRTCClosed: the call ended (hang-up, the network): a new one, as after a lost socket; a
  // call cannot be resumed.
  function onRTCClosed() {
    closeRTC();
    stats.sessionReady = false;
    stopMic();
    pttHeld = false;
    active = null;
    if (userClosed) {
      setStatus("idle", "disconnected");
      return;
    }
    reconnectLater("call ended");
  }

  function onMessage(sock, e) {
    if (sock !== ws) return;
    let ev;
    try { ev = JSON.parse(e.data); } catch (_) { return; }
    if (resumable && typeof ev.server_event_seq === "number") {
      if (ev.server_event_seq <= resumable.lastSeq) return; // replayed after a resume: seen
      resumable.lastSeq = ev.server_event_seq;
    }
    onEvent(ev);
  }

  // resume takes the session over from a new socket after a drop: the first event is
  // session.resume (browsers cannot set the resume headers); the server replays what this page
  // missed, and the reply in progress goes on. session_not_found (the grace ran out, the
  // session was evicted, the server restarted) starts a new session instead.
  function resume() {
    if (userClosed || !resumable) return;
    const u = endpoint();
    u.searchParams.set("session_id", resumable.sessionId);
    const key = $("apikey").value.trim();
    const protocols = ["realtime"];
    if (key) protocols.push("openai-insecure-api-key." + key);
    const sock = new WebSocket(u.href, protocols);
    ws = sock;
    stats.connects++;
    let answered = false;
    sock.onopen = () => {
      send({ type: "session.resume", session_id: resumable.sessionId, resume_token: resumable.token,
        last_received_server_event_seq: resumable.lastSeq });
    };
    sock.onmessage = (e) => {
      if (sock !== ws) return;
      if (answered) { onMessage(sock, e); return; }
      let ev;
      try { ev = JSON.parse(e.data); } catch (_) { return; }
      logEvent("in", ev);
      answered = true;
      if (ev.type === "session.resumed") {
        resumable.token = ev.resume_token;
        resumeTries = 0;
        retry = 0;
        stats.resumes++;
        stats.sessionReady = true;
        note(`resumed the session (${ev.replayed_events || 0} events replayed)`);
        setStatus("ready", mode === "ptt" ? "connected · push-to-talk" : "connected · hands-free");
        startMic().catch((err) => {
          showError({ code: "microphone", message: "microphone unavailable: " + (err && err.message || err) });
        });
        return;
      }
      // Refused: the session is gone. A new one, as after any lost session.
      const err = ev.error || {};
      note(`resume refused (${err.code || ev.type}); starting a new session`);
      resumable = null;
      sock.onclose = null;
      sock.close(1000, "resume refused");
      ws = null;
      connect();
    };
    sock.onclose = (e) => {
      if (sock !== ws) return;
      onClosed(answered, e);
    };
  }

  function onClosed(opened, e) {
    ws = null;
    stats.sessionReady = false;
    stopMic();
    pttHeld = false;
    // A drop without a close frame (1006) keeps the session on the server for its resume grace:
    // the page takes it over, and what was playing plays on.
    if (!userClosed && resumable && e.code === 1006 && resumeTries < RESUME_TRIES) {
      resumeTries++;
      const delay = 500 * resumeTries;
      setStatus("reconnecting", `connection lost; resuming the session in ${(delay / 1000).toFixed(1)} s`);
      note("connection lost; resuming the session");
      retryTimer = setTimeout(resume, delay);
      return;
    }
    resumable = null;
    resumeTries = 0;
    flush("disconnect");
    active = null;
    playingItem = null;
    if (userClosed) {
      setStatus("idle", "disconnected");
      return;
    }
    reconnectLater(opened ? `connection closed (${e.code}${e.reason ? " " + e.reason : ""})` : "could not connect");
  }

  // reconnectLater starts a new session after a backoff (exponential, jittered).
  function reconnectLater(why) {
    const delay = Math.min(10000, 500 * 2 ** retry) * (0.75 + Math.random() / 2);
    retry++;
    stats.reconnects++;
    setStatus("reconnecting", `${why}; retrying in ${(delay / 1000).toFixed(1)} s`);
    note(`${why}; reconnecting`);
    retryTimer = setTimeout(() => { if (!userClosed) connect(); }, delay);
  }

  function disconnect() {
    userClosed = true;
    clearTimeout(retryTimer);
    stopMic();
    if (rtc) {
      closeRTC();
      setStatus("idle", "disconnected");
    } else if (ws) {
      ws.close(1000, "bye");
    } else {
      setStatus("idle", "disconnected");
    }
  }

  function onEvent(ev) {
    logEvent("in", ev);
    switch (ev.type) {
      case "session.created":
        stats.sessionId = ev.session && ev.session.id || "";
        resumable = ev.resume_token && stats.sessionId
          ? { sessionId: stats.sessionId, token: ev.resume_token, lastSeq: ev.server_event_seq || 0 } : null;
        break;
      case "session.updated":
        if (!stats.sessionReady) {
          stats.sessionReady = true;
          retry = 0;
          setStatus("ready", mode === "ptt" ? "connected · push-to-talk" : "connected · hands-free");
          startMic().catch((e) => {
            showError({ code: "microphone", message: "microphone unavailable: " + (e && e.message || e) });
          });
        }
        break;
      case "error": {
        const err = ev.error || {};
        // A strictly GA server refuses the duplex extension; server_vad with create_response
        // means the same there, so the update is sent once more without it.
        if (!stats.sessionReady && !retriedWithoutExtension && /extra_body/.test((err.param || "") + (err.message || ""))) {
          retriedWithoutExtension = true;
          const s = sessionConfig();
          delete s.extra_body;
          send({ type: "session.update", session: s });
          break;
        }
        showError(err);
        break;
      }
      case "input_audio_buffer.speech_started":
        bargeIn("speech_started");
        break;
      case "input_audio_buffer.speech_stopped":
        inputEnd = performance.now();
        break;
      case "conversation.item.input_audio_transcription.delta": {
        let li = userItems.get(ev.item_id);
        if (!li) {
          li = bubble("user", "you", "");
          userItems.set(ev.item_id, li);
        }
        li.querySelector(".text").textContent += ev.delta || "";
        break;
      }
      case "conversation.item.input_audio_transcription.completed": {
        const text = (ev.transcript || "").trim();
        stats.userTranscripts.push(text);
        const li = userItems.get(ev.item_id) || bubble("user", "you", "");
        userItems.delete(ev.item_id);
        li.querySelector(".text").textContent = text || "(nothing recognized)";
        break;
      }
      case "response.created": {
        const id = ev.response && ev.response.id || ev.response_id;
        const t = { id, n: stats.turns.length + responses.size + 1, inputEnd, created: performance.now(), audioMs: 0, text: "" };
        inputEnd = 0;
        t.li = bubble("assistant", "assistant", "");
        responses.set(id, t);
        active = t;
        renderTurn(t);
        break;
      }
      case "response.output_audio.delta":
      case "response.audio.delta":
        playDelta(ev);
        break;
      case "response.output_audio_transcript.delta":
      case "response.audio_transcript.delta":
      case "response.output_text.delta":
      case "response.text.delta": {
        const t = responses.get(ev.response_id);
        if (t && ev.delta) {
          t.text += ev.delta;
          t.li.querySelector(".text").textContent = t.text.trim();
        }
        break;
      }
      case "response.done": {
        const r = ev.response || {};
        const t = responses.get(r.id);
        if (r.status === "cancelled" || r.status === "failed") {
          // Barge-in: whatever of this response is still queued must not play.
          if (!dropped.has(r.id)) bargeIn("response.done " + r.status);
        } else if (audio) {
          audio.player.port.postMessage({ type: "end" });
        }
        if (t) {
          responses.delete(r.id);
          t.status = r.status;
          t.reason = r.status_details && r.status_details.reason || "";
          t.doneMs = t.inputEnd ? performance.now() - t.inputEnd : undefined;
          if (t.status === "cancelled") t.li.classList.add("cancelled");
          stats.turns.push({ id: t.id, n: t.n, status: t.status, reason: t.reason, firstAudioMs: t.firstAudioMs, doneMs: t.doneMs, audioMs: t.audioMs });
          stats.assistantTranscripts.push(t.text.trim());
          renderTurn(t);
        }
        if (active && active.id === r.id) active = null;
        break;
      }
      // Over WebRTC the reply plays from the call's track, not from deltas: the server's
      // output_audio_buffer events say when its audio started and stopped playing.
      case "output_audio_buffer.started":
        rtcAudioStarted(ev.response_id);
        break;
      case "output_audio_buffer.stopped":
        rtcAudioStopped(ev.response_id);
        break;
      case "output_audio_buffer.cleared":
        rtcAudioStopped(ev.response_id);
        bargeIn("output_audio_buffer.cleared");
        break;
      case "session.closed":
        note(`session closed (${ev.reason || "server"})`);
        break;
      case "session.expired": // vllm-omni's dialect: the idle timeout ended the session
        note(`session expired (${ev.reason || "idle"})`);
        break;
    }
  }

  // ---- wiring --------------------------------------------------------------------------------

  function init() {
    $("url").value = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/realtime`;
    $("connect-form").addEventListener("submit", (e) => { e.preventDefault(); connect(); });
    $("disconnect").addEventListener("click", disconnect);
    $("filter").addEventListener("input", refilter);
    $("hide-audio").addEventListener("change", refilter);
    $("clear-log").addEventListener("click", () => $("log").replaceChildren());
    for (const r of document.querySelectorAll('input[name="mode"]')) {
      r.addEventListener("change", () => {
        // turn_detection is fixed once audio flows: a new mode is a new session.
        if ((ws || rtc) && !userClosed) { disconnect(); setTimeout(connect, 100); } else { mode = r.value; setStatus(stats.status, $("status").textContent); }
      });
    }
    const talk = $("talk");
    talk.addEventListener("pointerdown", (e) => { e.preventDefault(); talk.setPointerCapture(e.pointerId); pttDown(); });
    talk.addEventListener("pointerup", pttUp);
    talk.addEventListener("pointercancel", pttUp);
    talk.addEventListener("keydown", (e) => { if ((e.key === " " || e.key === "Enter") && !e.repeat) { e.preventDefault(); pttDown(); } });
    talk.addEventListener("keyup", (e) => { if (e.key === " " || e.key === "Enter") { e.preventDefault(); pttUp(); } });
    // Space anywhere outside a text field is the talk key too.
    document.addEventListener("keydown", (e) => {
      if (e.key !== " " || e.repeat || e.target === talk || e.target.closest("input, textarea, button, select")) return;
      e.preventDefault();
      pttDown();
    });
    document.addEventListener("keyup", (e) => {
      if (e.key === " " && e.target !== talk) pttUp();
    });
    window.addEventListener("pagehide", () => { userClosed = true; stopMic(); closeRTC(); if (ws) ws.close(1001, "page closed"); });
    setStatus("idle", "disconnected");
  }

  // drop closes the socket as a network failure would (the console then reconnects); for tests
  // and for trying the backoff by hand.
  const drop = () => { if (ws) ws.close(4000, "dropped"); else if (rtc) onRTCClosed(); };
  window.omni = { stats, connect, disconnect, pttDown, pttUp, drop };
  init();
})();
