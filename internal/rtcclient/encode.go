package rtcclient

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/omniserve/omniserve/internal/protocol"
)

// encodeEvent writes a client event of internal/protocol in the GA wire shape: the inverse of
// protocol.DecodeClientEvent for the events a WebRTC client sends (the unit test round-trips
// them), as the pointers that decoder returns. Audio appends are refused: a call's audio is RTP.
func encodeEvent(ev protocol.ClientEvent) ([]byte, error) {
	m := map[string]any{"type": ev.Type()}
	if id := ev.EventID(); id != "" {
		m["event_id"] = id
	}
	switch e := ev.(type) {
	case *protocol.InputAudioBufferCommit:
		if e.ResponseCreate != nil {
			m["response_create"] = *e.ResponseCreate
		}
	case *protocol.InputAudioBufferClear, *protocol.SessionClose:
	case *protocol.ResponseCancel:
		if e.ResponseID != "" {
			m["response_id"] = e.ResponseID
		}
	case *protocol.OutputAudioBufferClear:
		if e.ResponseID != "" {
			m["response_id"] = e.ResponseID
		}
	case *protocol.ResponseCreate:
		r := map[string]any{}
		if e.MaxOutputTokens != nil {
			r["max_output_tokens"] = *e.MaxOutputTokens
		}
		if e.Instructions != nil {
			r["instructions"] = *e.Instructions
		}
		if len(e.Modalities) > 0 {
			r["output_modalities"] = e.Modalities
		}
		if e.Conversation != "" {
			r["conversation"] = e.Conversation
		}
		if len(e.Metadata) > 0 {
			r["metadata"] = e.Metadata
		}
		if len(e.Input) > 0 {
			in := make([]any, 0, len(e.Input))
			for _, it := range e.Input {
				if it.Ref != "" {
					in = append(in, map[string]any{"type": "item_reference", "id": it.Ref})
					continue
				}
				in = append(in, message(it.Role, it.Text, nil))
			}
			r["input"] = in
		}
		if len(r) > 0 {
			m["response"] = r
		}
	case *protocol.ConversationItemCreate:
		var item map[string]any
		switch e.ItemType {
		case "function_call_output":
			item = map[string]any{"type": "function_call_output", "call_id": e.CallID, "output": e.Output}
		case "", "message":
			item = message(e.Role, e.Text, e.Audio)
		default:
			return nil, fmt.Errorf("rtcclient: conversation.item.create of type %q is not encodable", e.ItemType)
		}
		if e.ItemID != "" {
			item["id"] = e.ItemID
		}
		m["item"] = item
		if e.PreviousItemID != "" {
			m["previous_item_id"] = e.PreviousItemID
		}
	case *protocol.ConversationItemTruncate:
		m["item_id"], m["content_index"], m["audio_end_ms"] = e.ItemID, e.ContentIndex, e.AudioEndMs
	case *protocol.ConversationItemDelete:
		m["item_id"] = e.ItemID
	case *protocol.ConversationItemRetrieve:
		m["item_id"] = e.ItemID
	default:
		// session.update's patch has dozens of optional fields: UpdateSession sends the JSON
		// session object as the caller wrote it instead.
		return nil, fmt.Errorf("rtcclient: %s (%T) is not encodable here", ev.Type(), ev)
	}
	return json.Marshal(m)
}

func message(role, text string, audio []byte) map[string]any {
	if role == "" {
		role = "user"
	}
	typ := "input_text"
	if role == "assistant" {
		typ = "output_text"
	}
	var content []any
	if text != "" {
		content = append(content, map[string]any{"type": typ, "text": text})
	}
	if len(audio) > 0 {
		content = append(content, map[string]any{"type": "input_audio", "audio": base64.StdEncoding.EncodeToString(audio)})
	}
	return map[string]any{"type": "message", "role": role, "content": content}
}
