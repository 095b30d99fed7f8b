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
		if _, custom := reflect.New(typ).Interface().(json.Marshaler); custom {
			return
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
		{"response.output_audio_transcript.delta", ResponseOutputAudioTranscriptDelta{Delta: "héllo \"<you>\"\n",
			ItemID: "item_resp_1", ResponseID: "resp_1"}},
		{"response.output_text.delta", ResponseOutputTextDelta{Delta: "Hi", ItemID: "item_resp_1", ResponseID: "resp_1"}},
	}
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
