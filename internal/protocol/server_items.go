package protocol

import (
	"encoding/json"
	"strings"
)

// Item is a conversation item (object realtime.item) as the server describes it: a message
// (Role and Content), a function_call (CallID, Name, Arguments) or a function_call_output
// (CallID, Output). The pointer fields are the ones an item type has and the others lack: nil
// leaves the key out.
type Item struct {
	Arguments *string `json:"arguments,omitempty"`
	CallID    *string `json:"call_id,omitempty"`
	// Content is a message's parts; a message always writes the key ([] when it has none),
	// other items never.
	Content []ContentPart `json:"content,omitempty"`
	ID      string        `json:"id"`
	Name    *string       `json:"name,omitempty"`
	Object  string        `json:"object"`
	Output  *string       `json:"output,omitempty"`
	Role    string        `json:"role,omitempty"`
	Status  string        `json:"status"`
	Type    string        `json:"type"`
	// Open is an item this package does not type yet (mcp_list_tools, built by the session's
	// MCP code as a map): when set, it is the item's whole JSON.
	Open map[string]any `json:"-"`
}

// MarshalJSON writes Open when set; otherwise the fields, with a message's empty content as [].
func (it Item) MarshalJSON() ([]byte, error) {
	if it.Open != nil {
		return json.Marshal(it.Open)
	}
	type plain Item
	if it.Type == "message" && len(it.Content) == 0 {
		// omitempty would drop an empty list: a message always has its content key.
		b, err := json.Marshal(plain(it))
		if err != nil {
			return nil, err
		}
		return spliceEmptyContent(b), nil
	}
	return json.Marshal(plain(it))
}

// spliceEmptyContent puts "content":[] into an item object encoded without it, in its sorted
// place (after arguments / call_id, which a message does not have: first).
func spliceEmptyContent(b []byte) []byte {
	out := make([]byte, 0, len(b)+13)
	out = append(out, `{"content":[],`...)
	return append(out, b[1:]...)
}

// MessageItem is a message item.
func MessageItem(id, role, status string, content ...ContentPart) Item {
	if content == nil {
		content = []ContentPart{}
	}
	return Item{ID: id, Object: "realtime.item", Type: "message", Role: role, Status: status, Content: content}
}

// FunctionCallItem is a function_call item.
func FunctionCallItem(id, status, callID, name, arguments string) Item {
	return Item{ID: id, Object: "realtime.item", Type: "function_call", Status: status,
		CallID: &callID, Name: &name, Arguments: &arguments}
}

// FunctionCallOutputItem is a function_call_output item.
func FunctionCallOutputItem(id, status, callID, output string) Item {
	return Item{ID: id, Object: "realtime.item", Type: "function_call_output", Status: status,
		CallID: &callID, Output: &output}
}

// betaItem is it in beta spelling: assistant parts are audio / text.
func betaItem(it Item) Item {
	if len(it.Content) == 0 {
		return it
	}
	parts := make([]ContentPart, len(it.Content))
	for i, p := range it.Content {
		parts[i] = p.beta()
	}
	it.Content = parts
	return it
}

func betaItems(items []Item) []Item {
	if items == nil {
		return nil
	}
	out := make([]Item, len(items))
	for i, it := range items {
		out[i] = betaItem(it)
	}
	return out
}

// ContentPart is one part of a message: input_text / output_text / text carry Text,
// input_audio / output_audio / audio carry Transcript (an input_audio part's transcript is
// null until the audio was transcribed: TranscriptNull).
type ContentPart struct {
	Type           string
	Text           string
	Transcript     string
	TranscriptNull bool
}

// TextPart is a part of type typ carrying text.
func TextPart(typ, text string) ContentPart { return ContentPart{Type: typ, Text: text} }

// AudioPart is a part of type typ carrying transcript.
func AudioPart(typ, transcript string) ContentPart {
	return ContentPart{Type: typ, Transcript: transcript}
}

// InputAudioPart is a user's audio part; an empty transcript is null (not transcribed).
func InputAudioPart(transcript string) ContentPart {
	return ContentPart{Type: "input_audio", Transcript: transcript, TranscriptNull: transcript == ""}
}

func (p ContentPart) beta() ContentPart {
	switch p.Type {
	case "output_audio":
		p.Type = "audio"
	case "output_text":
		p.Type = "text"
	}
	return p
}

// MarshalJSON writes the part's two keys: its text or transcript, and its type.
func (p ContentPart) MarshalJSON() ([]byte, error) {
	var b []byte
	if strings.HasSuffix(p.Type, "audio") {
		b = append(b, `{"transcript":`...)
		if p.TranscriptNull {
			b = append(b, "null"...)
		} else {
			b = appendString(b, p.Transcript)
		}
	} else {
		b = append(b, `{"text":`...)
		b = appendString(b, p.Text)
	}
	b = append(b, `,"type":`...)
	b = appendString(b, p.Type)
	return append(b, '}'), nil
}
