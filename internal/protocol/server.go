package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
)

// ServerEvent is one server event's payload: every field but type, event_id and
// server_event_seq, which the transport stamps when it writes the event (Envelope).
//
// Every payload type declares its fields, and the fields of every struct it nests, in
// alphabetical order of their JSON names (server_test.go checks it): the frames then carry
// their keys sorted, byte for byte as a map would encode them, and Encode only has to splice
// the envelope's three keys into the top level.
type ServerEvent interface {
	// EventType is the GA event type (response.output_audio.delta, conversation.item.added).
	EventType() string
}

// betaSpeller is a payload whose beta dialect (OpenAI-Beta: realtime=v1) spells fields
// differently: content part types audio / text instead of output_audio / output_text, the
// beta session object. Encode writes what Beta returns for a beta session.
type betaSpeller interface {
	betaSpelling() ServerEvent
}

// wireSizer is a payload that knows its encoded size cheaply (the per-chunk deltas): the
// outbound queue budgets bytes per event and must not encode to learn them.
type wireSizer interface {
	wireSize() int
}

// framer is a payload that writes its whole frame itself, envelope included, without the
// reflection of encoding/json: the audio delta, sent every few tens of milliseconds. Its output
// is what the generic path writes (server_test.go compares them).
type framer interface {
	frame(env Envelope) ([]byte, error)
}

// Envelope is what the transport stamps on an event as it writes it.
type Envelope struct {
	// Type is the event type as written: the GA name, or the beta one (BetaEventName).
	Type    string
	EventID string
	// Seq is server_event_seq (the session's event number); 0 leaves it out (an event sent
	// outside the numbering, such as session.resumed).
	Seq int64
}

// Encode writes ev as one frame: its payload with env's keys spliced in where a sorted
// encoding puts them. beta selects the beta field spelling (the session speaks the beta
// dialect); the event's name is env.Type, already mapped by the caller.
func Encode(ev ServerEvent, env Envelope, beta bool) ([]byte, error) {
	if f, ok := ev.(framer); ok {
		return f.frame(env)
	}
	if beta {
		if b, ok := ev.(betaSpeller); ok {
			ev = b.betaSpelling()
		}
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", ev.EventType(), err)
	}
	if len(body) < 2 || body[0] != '{' {
		return nil, fmt.Errorf("encoding %s: payload is not a JSON object", ev.EventType())
	}
	keys := make([]envKey, 0, 3)
	keys = append(keys, envKey{"event_id", appendString(nil, env.EventID)})
	if env.Seq != 0 {
		keys = append(keys, envKey{"server_event_seq", strconv.AppendInt(nil, env.Seq, 10)})
	}
	keys = append(keys, envKey{"type", appendString(nil, env.Type)})
	return splice(body, keys)
}

type envKey struct {
	name  string
	value []byte
}

// splice inserts keys (sorted) into the top level of the JSON object body, whose own keys are
// sorted, each before the first key that sorts after it.
func splice(body []byte, keys []envKey) ([]byte, error) {
	extra := 0
	for _, k := range keys {
		extra += len(k.name) + len(k.value) + 4
	}
	out := make([]byte, 0, len(body)+extra)
	out = append(out, '{')
	i, first := 1, true
	put := func(k envKey) {
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, '"')
		out = append(out, k.name...)
		out = append(out, '"', ':')
		out = append(out, k.value...)
	}
	for i < len(body)-1 {
		if body[i] == ',' {
			i++
		}
		if body[i] != '"' {
			return nil, fmt.Errorf("splicing the envelope: a key expected at byte %d", i)
		}
		end := stringEnd(body, i)
		if end < 0 {
			return nil, fmt.Errorf("splicing the envelope: an unterminated key at byte %d", i)
		}
		name := string(body[i+1 : end-1])
		for len(keys) > 0 && keys[0].name < name {
			put(keys[0])
			keys = keys[1:]
		}
		vend := valueEnd(body, end)
		if vend < 0 {
			return nil, fmt.Errorf("splicing the envelope: a malformed value of %q", name)
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, body[i:vend]...)
		i = vend
	}
	for _, k := range keys {
		put(k)
	}
	return append(out, '}'), nil
}

// stringEnd is the index just past the JSON string that starts at body[i] ('"'), or -1.
func stringEnd(body []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(body[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		bs := 0
		for p := j - 1; p > i && body[p] == '\\'; p-- {
			bs++
		}
		if bs%2 == 0 {
			return j + 1
		}
		j++
	}
}

// valueEnd is the index just past the value that follows the ':' at body[i], or -1.
func valueEnd(body []byte, i int) int {
	if i >= len(body) || body[i] != ':' {
		return -1
	}
	i++
	depth := 0
	for i < len(body) {
		switch body[i] {
		case '"':
			e := stringEnd(body, i)
			if e < 0 {
				return -1
			}
			i = e
			if depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of the enclosing object
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case ',':
			if depth == 0 {
				return i
			}
		}
		i++
	}
	return -1
}

func appendString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always encodes
	return append(dst, b...)
}

// WireSize estimates the encoded size of ev in bytes (its strings, keys and a few bytes per
// number) without encoding it; the per-chunk deltas answer at once, the rest are walked.
func WireSize(ev ServerEvent) int {
	if s, ok := ev.(wireSizer); ok {
		return s.wireSize()
	}
	return valueSize(reflect.ValueOf(ev))
}

func valueSize(v reflect.Value) int {
	switch v.Kind() {
	case reflect.String:
		return v.Len() + 2
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return 4
		}
		return valueSize(v.Elem())
	case reflect.Struct:
		n := 2
		t := v.Type()
		for i := range t.NumField() {
			n += len(t.Field(i).Name) + 4 + valueSize(v.Field(i))
		}
		return n
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			return v.Len() + 2 // json.RawMessage and the like
		}
		n := 2
		for i := range v.Len() {
			n += 1 + valueSize(v.Index(i))
		}
		return n
	case reflect.Map:
		n := 2
		it := v.MapRange()
		for it.Next() {
			n += valueSize(it.Key()) + 2 + valueSize(it.Value())
		}
		return n
	}
	return 8
}

// BetaEventName is the beta spelling (OpenAI-Beta: realtime=v1) of a GA server event type;
// keep is false for an event the beta dialect does not have (conversation.item.done).
func BetaEventName(ga string) (name string, keep bool) {
	switch ga {
	case "conversation.item.done":
		return "", false
	case "conversation.item.added":
		return "conversation.item.created", true
	case "response.output_text.delta":
		return "response.text.delta", true
	case "response.output_text.done":
		return "response.text.done", true
	case "response.output_audio.delta":
		return "response.audio.delta", true
	case "response.output_audio.done":
		return "response.audio.done", true
	case "response.output_audio_transcript.delta":
		return "response.audio_transcript.delta", true
	case "response.output_audio_transcript.done":
		return "response.audio_transcript.done", true
	}
	return ga, true
}

// marshalFloat encodes f as encoding/json does.
func marshalFloat(f float64) ([]byte, error) { return json.Marshal(f) }

// appendFloat writes f as encoding/json does, for the values a frame carries (finite, written
// without an exponent); others go through encoding/json.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if abs := math.Abs(f); math.IsInf(f, 0) || math.IsNaN(f) || (abs != 0 && (abs < 1e-6 || abs >= 1e21)) {
		j, err := json.Marshal(f)
		if err != nil {
			return nil, err
		}
		return append(b, j...), nil
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64), nil
}

// appendBase64 writes s, base64 audio, as a JSON string: as it is when it is plain base64 (no
// byte needs escaping), else through encoding/json.
func appendBase64(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
			return appendString(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
