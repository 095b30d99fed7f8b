package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
)

// Extended is a server event in a dialect's shape (vllm-omni's duplex dialect adds metadata to
// audio deltas, nests input_audio_buffer.committed's details under event, and so on): Event is
// encoded as usual (in its beta spelling for a beta session), then Set's keys replace or add
// its own top-level keys, and Patch, when set, edits the whole decoded object. The result is
// still one JSON object with sorted keys, as Encode's envelope splice needs.
type Extended struct {
	Event ServerEvent
	Set   map[string]any
	Patch func(map[string]any)
	// Type, when set, is the event's type instead of the inner event's (the same event under
	// another name: vllm-omni sends an item's conversation.item.added as .created too).
	Type string
}

// EventType implements ServerEvent: Type, else the inner event's type.
func (e Extended) EventType() string {
	if e.Type != "" {
		return e.Type
	}
	return e.Event.EventType()
}

// betaSpelling keeps the changes on the inner event's beta spelling.
func (e Extended) betaSpelling() ServerEvent {
	if b, ok := e.Event.(betaSpeller); ok {
		e.Event = b.betaSpelling()
	}
	return e
}

// wireSize is the inner event's size and the added keys' (estimated, as WireSize does).
func (e Extended) wireSize() int {
	n := WireSize(e.Event)
	for k, v := range e.Set {
		n += len(k) + 4 + valueSize(reflect.ValueOf(v))
	}
	return n
}

// MarshalJSON encodes the inner event, then applies Set and Patch. Without Patch the inner
// event's values are copied as they were encoded (an audio delta's base64 is not decoded).
func (e Extended) MarshalJSON() ([]byte, error) {
	body, err := json.Marshal(e.Event)
	if err != nil {
		return nil, err
	}
	if e.Patch != nil {
		return e.patched(body)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("extending %s: %w", e.Event.EventType(), err)
	}
	for k, v := range e.Set {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("extending %s with %s: %w", e.Event.EventType(), k, err)
		}
		m[k] = b
	}
	return json.Marshal(m) // a map's keys are written sorted
}

// patched is MarshalJSON with Patch: the object decoded whole (numbers kept as written).
func (e Extended) patched(body []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("extending %s: %w", e.Event.EventType(), err)
	}
	for k, v := range e.Set {
		m[k] = v
	}
	e.Patch(m)
	return json.Marshal(m)
}
