package session

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/omniserve/omniserve/internal/mcpclient"
)

// item is one conversation item as the session tracks it for retrieve/delete/truncate.
type item struct {
	ID, Role, Type, Status string
	Text                   string
	Audio                  bool
	AudioMs                float64
	ResponseID             string
	Transcript             string
	Truncated              bool // conversation.item.truncate cut it: its transcript is gone
	// function_call (CallID, Name, Arguments) and function_call_output (CallID, Output) items.
	CallID, Name, Arguments, Output string
	// mcp_list_tools items (mcp.go): the server and the tools it listed.
	ServerLabel string
	MCPTools    []mcpclient.Tool
	// MCP is what mcp_call and mcp_approval_* items carry besides (mcp_call.go).
	MCP *mcpItem
	// CommittedAt is a user audio item's commit time (statistics clock), for its
	// transcription latency.
	CommittedAt float64
}

func newItemID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "item_" + hex.EncodeToString(b[:])
}

// wire is the item as GA (output_audio / output_text parts) or beta (audio / text) spell it.
func (it *item) wire(beta bool) map[string]any {
	switch it.Type {
	case "function_call":
		return map[string]any{"id": it.ID, "object": "realtime.item", "type": it.Type, "status": it.Status,
			"call_id": it.CallID, "name": it.Name, "arguments": it.Arguments}
	case "mcp_list_tools":
		return mcpListWire(it)
	case "mcp_call", "mcp_approval_request", "mcp_approval_response":
		return mcpItemWire(it)
	case "function_call_output":
		return map[string]any{"id": it.ID, "object": "realtime.item", "type": it.Type, "status": it.Status,
			"call_id": it.CallID, "output": it.Output}
	}
	var content []any
	switch {
	case it.Role == "assistant" && it.Audio:
		t := "output_audio"
		if beta {
			t = "audio"
		}
		content = []any{map[string]any{"type": t, "transcript": it.Text}}
	case it.Role == "assistant":
		t := "output_text"
		if beta {
			t = "text"
		}
		content = []any{map[string]any{"type": t, "text": it.Text}}
	case it.Audio:
		content = []any{map[string]any{"type": "input_audio", "transcript": nullable(it.Transcript)}}
	default:
		content = []any{map[string]any{"type": "input_text", "text": it.Text}}
	}
	return map[string]any{"id": it.ID, "object": "realtime.item", "type": it.Type, "role": it.Role,
		"status": it.Status, "content": content}
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (s *Session) findItem(id string) *item {
	for _, it := range s.items {
		if it.ID == id {
			return it
		}
	}
	return nil
}

func (s *Session) lastItemID() any {
	if len(s.items) == 0 {
		return nil
	}
	return s.items[len(s.items)-1].ID
}

// previousItemID is the id of the item before it in the conversation, or nil.
func (s *Session) previousItemID(it *item) any {
	for i, x := range s.items {
		if x == it {
			if i == 0 {
				return nil
			}
			return s.items[i-1].ID
		}
	}
	return nil
}

// insertItem adds it after the item prev ("" = at the end, "root" = first); false when prev
// does not exist.
func (s *Session) insertItem(it *item, prev string) bool {
	switch prev {
	case "":
		s.items = append(s.items, it)
		return true
	case "root":
		s.items = append([]*item{it}, s.items...)
		return true
	}
	for i, x := range s.items {
		if x.ID == prev {
			s.items = append(s.items[:i+1], append([]*item{it}, s.items[i+1:]...)...)
			return true
		}
	}
	return false
}

// sendItemAdded emits conversation.item.added (the connection spells it
// conversation.item.created for beta clients).
func (s *Session) sendItemAdded(it *item, epoch int, model bool) {
	s.send(Event{Type: "conversation.item.added", Epoch: epoch, Model: model, Fields: map[string]any{
		"previous_item_id": s.previousItemID(it), "item": it.wire(s.opts.Beta)}})
}

// sendItemDone emits conversation.item.done (GA only; beta clients do not get it).
func (s *Session) sendItemDone(it *item, epoch int) {
	s.send(Event{Type: "conversation.item.done", Epoch: epoch, Fields: map[string]any{
		"previous_item_id": s.previousItemID(it), "item": it.wire(s.opts.Beta)}})
}

func (s *Session) removeItem(id string) bool {
	for i, it := range s.items {
		if it.ID == id {
			s.items = append(s.items[:i], s.items[i+1:]...)
			return true
		}
	}
	return false
}

// rawJSON is JSON kept as written (a tool's parameters schema) in an event's fields.
type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }
