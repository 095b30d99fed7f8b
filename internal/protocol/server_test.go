package protocol

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/server/*.json")

// TestServerEventsGolden encodes one value of every server event type, GA and beta, and
// compares the frames with testdata/server/<name>.json (go test -update rewrites them).
func TestServerEventsGolden(t *testing.T) {
	for _, tt := range serverSamples() {
		for _, beta := range []bool{false, true} {
			name := tt.name
			typ, keep := tt.ev.EventType(), true
			if beta {
				name += ".beta"
				typ, keep = BetaEventName(typ)
				if !keep {
					continue
				}
			}
			t.Run(name, func(t *testing.T) {
				got, err := Encode(tt.ev, Envelope{Type: typ, EventID: "event_1", Seq: 7}, beta)
				require.NoError(t, err)
				var indented bytes.Buffer
				require.NoError(t, json.Indent(&indented, got, "", "  "))
				indented.WriteByte('\n')
				path := filepath.Join("testdata", "server", name+".json")
				if *update {
					require.NoError(t, os.WriteFile(path, indented.Bytes(), 0o644))
				}
				want, err := os.ReadFile(path)
				require.NoError(t, err, "go test ./internal/protocol/ -run Golden -update writes it")
				require.Equal(t, string(want), indented.String())
			})
		}
	}
}

// TestEncodeMatchesMapEncoding: a typed event's frame is byte for byte what the same event
// built as a map encodes to (json sorts map keys), the frames omniserve sent before the
// events were typed.
func TestEncodeMatchesMapEncoding(t *testing.T) {
	for _, tt := range serverSamples() {
		for _, beta := range []bool{false, true} {
			for _, seq := range []int64{0, 12} {
				env := Envelope{Type: tt.ev.EventType(), EventID: "event_x", Seq: seq}
				got, err := Encode(tt.ev, env, beta)
				require.NoError(t, err, tt.name)
				ev := tt.ev
				if b, ok := ev.(betaSpeller); ok && beta {
					ev = b.betaSpelling()
				}
				body, err := json.Marshal(ev)
				require.NoError(t, err)
				dec := json.NewDecoder(bytes.NewReader(body))
				dec.UseNumber()
				var m map[string]any
				require.NoError(t, dec.Decode(&m))
				m["type"], m["event_id"] = env.Type, env.EventID
				if seq != 0 {
					m["server_event_seq"] = seq
				}
				want, err := json.Marshal(m)
				require.NoError(t, err)
				require.Equal(t, string(want), string(got), tt.name)
			}
		}
	}
}

// TestServerEventFieldsSorted: every payload struct, and every struct it nests, declares its
// fields in the order of their JSON names (Encode relies on it).
func TestServerEventFieldsSorted(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var check func(t *testing.T, typ reflect.Type)
	check = func(t *testing.T, typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] {
			return
		}
		seen[typ] = true
		if _, custom := reflect.New(typ).Interface().(json.Marshaler); custom && !hasJSONTags(typ) {
			return // it writes its keys itself (ContentPart)
		}
		var names []string
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			require.NotEmpty(t, name, "%s.%s has no json name", typ.Name(), f.Name)
			names = append(names, name)
			check(t, f.Type)
		}
		require.True(t, sort.StringsAreSorted(names), "%s: fields out of order: %v", typ.Name(), names)
	}
	// The session objects sit behind an interface (SessionObject): named here.
	for _, o := range []any{Session{}, TranscriptionSession{}, betaSession{}, betaTranscriptionSession{}} {
		check(t, reflect.TypeOf(o))
	}
	for _, tt := range serverSamples() {
		check(t, reflect.TypeOf(tt.ev))
		if b, ok := tt.ev.(betaSpeller); ok {
			check(t, reflect.TypeOf(b.betaSpelling()))
		}
	}
}

func TestWireSizeNearEncodedSize(t *testing.T) {
	for _, tt := range serverSamples() {
		data, err := Encode(tt.ev, Envelope{Type: tt.ev.EventType(), EventID: "event_1", Seq: 1}, false)
		require.NoError(t, err)
		n := WireSize(tt.ev) + 64
		require.True(t, n >= len(data)/2 && n <= 3*len(data)+64, "%s: estimate %d for %d bytes", tt.name, n, len(data))
	}
}

func TestSpliceRefusesMalformedBodies(t *testing.T) {
	for _, body := range []string{`{"a":"x`, `{1:2}`, `{"a" 1}`} {
		_, err := splice([]byte(body), []envKey{{"type", []byte(`"t"`)}})
		require.Error(t, err, body)
	}
}

func BenchmarkEncodeAudioDelta(b *testing.B) {
	ev := ResponseOutputAudioDelta{AudioDurationMs: 40, Delta: strings.Repeat("QUJD", 640), Format: "pcm16",
		ItemID: "item_resp_1", ResponseID: "resp_1", SampleRateHz: 24000}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(ev, Envelope{Type: "response.output_audio.delta", EventID: "event_0123456789abcdef", Seq: 42}, false); err != nil {
			b.Fatal(err)
		}
	}
}

type sample struct {
	name string
	ev   ServerEvent
}

// serverSamples holds one value of every server event type, with escapes, nulls and empty
// lists where the type has them.
func serverSamples() []sample {
	return []sample{
		{"response.output_audio.delta", ResponseOutputAudioDelta{AudioDurationMs: 40, Delta: "AAECAw==", Format: "pcm16",
			ItemID: "item_resp_1", ResponseID: "resp_1", SampleRateHz: 24000}},
		{"response.output_audio.delta.escaped", ResponseOutputAudioDelta{AudioDurationMs: 12.5, Delta: "not <base64> \"at\" all\n", Format: "g711_ulaw",
			ItemID: "item_<1>", OutputIndex: 2, ContentIndex: 1, ResponseID: "resp_\"1\"", SampleRateHz: 8000}},
		{"response.output_audio.delta.tiny", ResponseOutputAudioDelta{AudioDurationMs: 1e-7, Delta: "", Format: "pcm16", SampleRateHz: 24000}},
		{"response.output_audio_transcript.delta", ResponseOutputAudioTranscriptDelta{Delta: "héllo \"<you>\"\n",
			ItemID: "item_resp_1", ResponseID: "resp_1"}},
		{"response.output_text.delta", ResponseOutputTextDelta{Delta: "Hi", ItemID: "item_resp_1", ResponseID: "resp_1"}},
		{"response.created", ResponseCreated{ResponseID: "resp_1", Response: sampleResponse("in_progress", nil, []Item{}, nil)}},
		{"response.done", ResponseDone{ResponseID: "resp_1", Response: sampleResponse("cancelled",
			&StatusDetails{Type: "cancelled", Reason: "turn_detected"},
			[]Item{MessageItem("item_resp_1", "assistant", "incomplete", AudioPart("output_audio", "Hello the")),
				FunctionCallItem("item_2", "completed", "call_1", "get_weather", `{"city":"Paris"}`)},
			&Usage{TotalTokens: 30, InputTokens: 20, OutputTokens: 10,
				InputTokenDetails:  InputTokenDetails{TextTokens: 5, AudioTokens: 15, CachedTokens: 4, CachedTokensDetails: CachedTokenDetails{AudioTokens: 4}},
				OutputTokenDetails: OutputTokenDetails{TextTokens: 3, AudioTokens: 7}})}},
		{"response.output_item.added", ResponseOutputItemAdded{ResponseID: "resp_1",
			Item: MessageItem("item_resp_1", "assistant", "in_progress")}},
		{"response.output_item.done", ResponseOutputItemDone{ResponseID: "resp_1", OutputIndex: 1,
			Item: MessageItem("item_resp_1", "assistant", "completed", TextPart("output_text", "Hi"))}},
		{"response.content_part.added", ResponseContentPartAdded{ResponseID: "resp_1", ItemID: "item_resp_1", Part: AudioPart("audio", "")}},
		{"response.content_part.done", ResponseContentPartDone{ResponseID: "resp_1", ItemID: "item_resp_1", Part: TextPart("text", "Hi")}},
		{"response.output_audio.done", ResponseOutputAudioDone{ResponseID: "resp_1", ItemID: "item_resp_1"}},
		{"response.output_audio_transcript.done", ResponseOutputAudioTranscriptDone{ResponseID: "resp_1", ItemID: "item_resp_1", Transcript: "Hello"}},
		{"response.output_text.done", ResponseOutputTextDone{ResponseID: "resp_1", ItemID: "item_resp_1", Text: "Hi"}},
		{"response.listen", ResponseListen{SessionID: "duplex-1", Epoch: 2, Turn: 3, Response: ListenResponse{Object: "realtime.response", Status: "listening"}}},
		{"response.speak", ResponseSpeak{ResponseID: "resp_1", ItemID: "item_resp_1", Metadata: SpeakMetadata{SessionID: "duplex-1", Epoch: 2, ModelSpeak: true}}},
		{"output_audio_buffer.cleared", OutputAudioBufferCleared{ResponseID: ptr("resp_1"), ItemID: "item_resp_1", AudioEndMs: ptr(1200)}},
		{"output_audio_buffer.cleared.none", OutputAudioBufferCleared{}},
		{"output_audio_buffer.started", OutputAudioBufferStarted{ResponseID: "resp_1"}},
		{"output_audio_buffer.stopped", OutputAudioBufferStopped{ResponseID: "resp_1"}},
		{"rate_limits.updated", RateLimitsUpdated{RateLimits: []RateLimit{{Name: "requests"}, {Name: "tokens"}}}},
		{"conversation.item.added", ConversationItemAdded{Item: MessageItem("item_1", "user", "completed", InputAudioPart(""))}},
		{"conversation.item.added.assistant", ConversationItemAdded{PreviousItemID: ptr("item_1"),
			Item: MessageItem("item_resp_1", "assistant", "in_progress", AudioPart("output_audio", ""))}},
		{"conversation.item.done", ConversationItemDone{PreviousItemID: ptr("item_0"),
			Item: MessageItem("item_1", "user", "completed", InputAudioPart("hello"))}},
		{"conversation.item.retrieved", ConversationItemRetrieved{Item: FunctionCallOutputItem("item_3", "completed", "call_1", `{"temp":21}`)}},
		{"conversation.item.retrieved.open", ConversationItemRetrieved{Item: Item{ID: "item_4", Type: "mcp_list_tools",
			Open: map[string]any{"id": "item_4", "object": "realtime.item", "type": "mcp_list_tools", "server_label": "files", "tools": []any{}}}}},
		{"conversation.item.deleted", ConversationItemDeleted{ItemID: "item_1"}},
		{"conversation.item.deleted.budget", ConversationItemDeleted{ItemID: "item_1", Reason: "history_budget"}},
		{"conversation.item.truncated", ConversationItemTruncated{ItemID: "item_resp_1", AudioEndMs: 640}},
		{"conversation.item.input_audio_transcription.completed", TranscriptionCompleted{ItemID: "item_1", Transcript: "go forward ten meters",
			Usage: &TranscriptionUsage{Type: "duration", Seconds: 2.35}}},
		{"conversation.item.input_audio_transcription.delta", TranscriptionDelta{ItemID: "item_1", Delta: "go "}},
		{"conversation.item.input_audio_transcription.failed", TranscriptionFailed{ItemID: "item_1",
			Error: TranscriptionError{Type: "transcription_error", Code: "engine_error", Message: "engine: gone"}}},
		{"input_audio_buffer.committed", InputAudioBufferCommitted{ItemID: "item_2", PreviousItemID: ptr("item_1")}},
		{"input_audio_buffer.cleared", InputAudioBufferCleared{}},
		{"input_audio_buffer.speech_started", InputAudioBufferSpeechStarted{AudioStartMs: 300, ItemID: "item_2"}},
		{"input_audio_buffer.speech_stopped", InputAudioBufferSpeechStopped{AudioEndMs: 1900, ItemID: "item_2"}},
		{"input_audio_buffer.timeout_triggered", InputAudioBufferTimeoutTriggered{AudioStartMs: 1900, AudioEndMs: 7900, ItemID: "item_3"}},
		{"playback.acknowledged", PlaybackAcknowledged{ResponseID: "resp_1", ItemID: "item_resp_1", PlayedMs: 120, SentMs: 200}},
		{"overlap.decision", OverlapDecision{SessionID: "duplex-1", Epoch: 1, Policy: "barge_in", Action: "barge_in", Reason: "speech"}},
		{"error", NewErrorEvent("invalid_request_error", "invalid_value", "bad <value> & more", "evt_1", "session.voice")},
		{"error.nulls", NewErrorEvent("server_error", "engine_error", "engine: gone", "", "")},
		{"session.created", SessionCreated{Session: sampleSession(), ResumeToken: "rt_1"}},
		{"session.updated", SessionUpdated{Session: sampleSession()}},
		{"session.updated.semantic", SessionUpdated{Session: func() SessionObject {
			s := sampleSession()
			s.Audio.Input.TurnDetection = &TurnDetectionObject{Type: "semantic_vad", Eagerness: "high", CreateResponse: true}
			s.Audio.Input.NoiseReduction, s.Audio.Input.Transcription = nil, nil
			s.Audio.Output.Format = FormatSpec{Type: "audio/pcmu"}
			s.OutputModalities = []string{"text"}
			return s
		}()}},
		{"transcription_session.created", SessionCreated{Transcription: true, Session: sampleTranscriptionSession()}},
		{"session.created.transcription", SessionCreated{Session: sampleTranscriptionSession()}},
		{"session.resumed", SessionResumed{SessionID: "duplex-1", ResumeToken: "rt_2", Session: sampleSession(),
			LastReceivedServerEventSeq: 10, LastServerEventSeq: 14, ReplayedEvents: 4}},
		{"session.resumed.resync", SessionResumed{SessionID: "duplex-1", ResumeToken: "rt_2", Session: sampleSession(), ResyncRequired: true,
			Items:                      &[]Item{MessageItem("item_resp_1", "assistant", "in_progress", AudioPart("output_audio", "Hel"))},
			Response:                   func() *Response { r := sampleResponse("in_progress", nil, []Item{}, nil); return &r }(),
			LastReceivedServerEventSeq: 10, LastServerEventSeq: 40}},
		{"session.closing", SessionClosing{SessionID: "duplex-1", Reason: "server_shutdown", GraceMs: 30000}},
		{"session.closed", SessionClosed{SessionID: "duplex-1", Reason: "client_close"}},
		{"session.heartbeat_ack", SessionHeartbeatAck{SessionID: "duplex-1"}},
		{"response.function_call_arguments.delta", ResponseFunctionCallArgumentsDelta{ResponseID: "resp_1", ItemID: "item_2",
			OutputIndex: 1, CallID: "call_1", Delta: `{"city":"Paris"}`}},
		{"response.function_call_arguments.done", ResponseFunctionCallArgumentsDone{ResponseID: "resp_1", ItemID: "item_2",
			OutputIndex: 1, CallID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}},
		{"mcp_list_tools.in_progress", MCPListToolsInProgress{ItemID: "item_4"}},
		{"mcp_list_tools.completed", MCPListToolsCompleted{ItemID: "item_4"}},
		{"mcp_list_tools.failed", MCPListToolsFailed{ItemID: "item_4"}},
		{"response.mcp_call_arguments.delta", ResponseMCPCallArgumentsDelta{ResponseID: "resp_1", ItemID: "item_5", OutputIndex: 1, Delta: `{"a":2}`}},
		{"response.mcp_call_arguments.done", ResponseMCPCallArgumentsDone{ResponseID: "resp_1", ItemID: "item_5", OutputIndex: 1, Arguments: `{"a":2}`}},
		{"response.mcp_call.in_progress", ResponseMCPCallInProgress{ItemID: "item_5", OutputIndex: 1}},
		{"response.mcp_call.completed", ResponseMCPCallCompleted{ItemID: "item_5", OutputIndex: 1}},
		{"response.mcp_call.failed", ResponseMCPCallFailed{ItemID: "item_5", OutputIndex: 1}},
	}
}

func sampleResponse(status string, details *StatusDetails, output []Item, u *Usage) Response {
	return Response{ID: "resp_1", Object: "realtime.response", Status: status, StatusDetails: details, Output: output,
		ConversationID: ptr("conv_1"), Metadata: map[string]string{"topic": "weather"}, MaxOutputTokens: 0,
		Omniserve:        ResponseExtension{SessionID: "duplex-1", Epoch: 2, TurnID: 3, AudioSentMs: 1200},
		OutputModalities: []string{"audio"}, Temperature: 0.7,
		Audio: &ResponseAudio{Output: AudioOutput{Format: FormatSpec{Type: "audio/pcm", Rate: 24000}, Voice: "alloy"}},
		Usage: u}
}

func sampleSession() *Session {
	speed := 1.0
	seed := uint32(7)
	return &Session{ID: "duplex-1", Object: "realtime.session", Type: "realtime", Model: "omni",
		Instructions: "Be brief.", Tools: []any{map[string]any{"type": "function", "name": "f", "description": "d"}}, ToolChoice: "auto",
		ExpiresAt: 1700000000, OutputModalities: []string{"audio"}, MaxOutputTokens: 512, Truncation: Truncation{Type: "auto"}, Temperature: 0.8,
		Audio: SessionAudio{
			Input: AudioInput{Format: FormatSpec{Type: "audio/pcm", Rate: 16000}, SampleRateHz: 16000,
				NoiseReduction: &NoiseReduction{Type: "near_field"}, Transcription: &Transcription{Model: "pocketsphinx", Language: "en"},
				TurnDetection: &TurnDetectionObject{Type: "server_vad", Threshold: 0.5, PrefixPaddingMs: 300, SilenceDurationMs: 500,
					CreateResponse: true, InterruptResponse: true}},
			Output: &AudioOutput{Format: FormatSpec{Type: "audio/pcm", Rate: 24000}, Voice: "alloy", Speed: &speed},
		},
		IdleTimeoutS: 600, OverlapPolicy: "barge_in", Duplex: true, AutoResponse: true, State: "open", TurnState: "idle", Epoch: 1, Turn: 2,
		ExtraBody: ExtraBody{AutoResponse: true, Seed: &seed},
		Capabilities: Capabilities{SupportsBargeIn: true, SupportsSessionResume: true, SupportsAudioTruncate: true, ChunkPeriodMs: 100,
			TargetBargeInLatencyMs: 100, BargeInMinSpeechMs: 240, BargeInPitchedSpeechMs: 150, MaxOutputLeadMs: 500, FullDuplex: true}}
}

func sampleTranscriptionSession() *TranscriptionSession {
	return &TranscriptionSession{ID: "duplex-2", Object: "realtime.transcription_session", Type: "transcription", ExpiresAt: 1700000000,
		Audio: SessionAudio{Input: AudioInput{Format: FormatSpec{Type: "audio/pcmu"}, SampleRateHz: 8000,
			Transcription: &Transcription{Model: "pocketsphinx", Language: "en"},
			TurnDetection: &TurnDetectionObject{Type: "server_vad", Threshold: 0.5, PrefixPaddingMs: 300, SilenceDurationMs: 500,
				IdleTimeoutMs: 5000, NoResponse: true}}},
		IdleTimeoutS: 600, State: "open", Capabilities: TranscriptionCapabilities{SupportsSessionResume: true}}
}

// BenchmarkEncodeAudioDeltaMap is the same frame built as a map, the way the session built it
// before the events were typed: the baseline of BenchmarkEncodeAudioDelta.
func BenchmarkEncodeAudioDeltaMap(b *testing.B) {
	delta := strings.Repeat("QUJD", 640)
	b.ReportAllocs()
	for b.Loop() {
		m := map[string]any{"response_id": "resp_1", "item_id": "item_resp_1", "output_index": 0, "content_index": 0,
			"delta": delta, "format": "pcm16", "sample_rate_hz": 24000, "audio_duration_ms": 40.0}
		m["type"] = "response.output_audio.delta"
		m["event_id"] = "event_0123456789abcdef"
		m["server_event_seq"] = int64(42)
		if _, err := json.Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
}

func hasJSONTags(typ reflect.Type) bool {
	for i := range typ.NumField() {
		if _, ok := typ.Field(i).Tag.Lookup("json"); ok {
			return true
		}
	}
	return false
}

// TestDecodeServerEvent: a client decoding a GA frame gets the value that was encoded (the
// re-encoded frame is the same bytes), with the envelope; a beta frame decodes into the same GA
// type; an event without a type comes back whole as an OtherEvent.
func TestDecodeServerEvent(t *testing.T) {
	for _, tt := range serverSamples() {
		env := Envelope{Type: tt.ev.EventType(), EventID: "event_9", Seq: 3}
		data, err := Encode(tt.ev, env, false)
		require.NoError(t, err)
		got, gotEnv, err := DecodeServerEvent(data)
		require.NoError(t, err, tt.name)
		require.Equal(t, env, gotEnv)
		again, err := Encode(got, env, false)
		require.NoError(t, err, tt.name)
		require.Equal(t, string(data), string(again), tt.name)

		beta, keep := BetaEventName(tt.ev.EventType())
		if !keep {
			continue
		}
		data, err = Encode(tt.ev, Envelope{Type: beta, EventID: "event_9"}, true)
		require.NoError(t, err)
		got, gotEnv, err = DecodeServerEvent(data)
		require.NoError(t, err, tt.name)
		require.Equal(t, reflect.TypeOf(tt.ev), reflect.TypeOf(got), tt.name)
		require.Equal(t, int64(0), gotEnv.Seq)
	}
	ev, env, err := DecodeServerEvent([]byte(`{"type":"x.future","event_id":"e","a":1}`))
	require.NoError(t, err)
	require.Equal(t, OtherEvent{Name: "x.future", Raw: json.RawMessage(`{"type":"x.future","event_id":"e","a":1}`)}, ev)
	require.Equal(t, "e", env.EventID)
	_, err = Encode(ev, env, false)
	require.Error(t, err, "an OtherEvent is never sent")
	_, _, err = DecodeServerEvent([]byte(`{"type":"response.done","response":"nope"}`))
	require.ErrorContains(t, err, "decoding response.done")
}
