package session

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/omniserve/omniserve/internal/mcpclient"
	"github.com/omniserve/omniserve/internal/protocol"
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
	// CalledAt is a function_call's response.function_call_arguments.done (statistics clock):
	// the start of the client's time to answer it.
	CalledAt float64
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

// item is the item as the protocol describes it, in GA spelling (output_audio / output_text
// parts; protocol.Encode spells them audio / text for beta clients).
func (it *item) item() protocol.Item {
	switch it.Type {
	case "function_call":
		return protocol.FunctionCallItem(it.ID, it.Status, it.CallID, it.Name, it.Arguments)
	case "mcp_list_tools":
		return protocol.Item{ID: it.ID, Type: it.Type, Open: mcpListWire(it)} // mcp.go builds it as a map
	case "mcp_call", "mcp_approval_request", "mcp_approval_response":
		return protocol.Item{ID: it.ID, Type: it.Type, Open: mcpItemWire(it)} // mcp_call.go builds them as maps
	case "function_call_output":
		return protocol.FunctionCallOutputItem(it.ID, it.Status, it.CallID, it.Output)
	}
	var part protocol.ContentPart
	switch {
	case it.Role == "assistant" && it.Audio:
		part = protocol.AudioPart("output_audio", it.Text)
	case it.Role == "assistant":
		part = protocol.TextPart("output_text", it.Text)
	case it.Audio:
		part = protocol.InputAudioPart(it.Transcript)
	default:
		part = protocol.TextPart("input_text", it.Text)
	}
	return protocol.MessageItem(it.ID, it.Role, it.Status, part)
}

func (s *Session) findItem(id string) *item {
	for _, it := range s.items {
		if it.ID == id {
			return it
		}
	}
	return nil
}

func (s *Session) lastItemID() *string {
	if len(s.items) == 0 {
		return nil
	}
	return &s.items[len(s.items)-1].ID
}

// previousItemID is the id of the item before it in the conversation, or nil.
func (s *Session) previousItemID(it *item) *string {
	for i, x := range s.items {
		if x == it {
			if i == 0 {
				return nil
			}
			id := s.items[i-1].ID
			return &id
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
	s.send(Event{Epoch: epoch, Model: model, Payload: protocol.ConversationItemAdded{
		PreviousItemID: s.previousItemID(it), Item: it.item()}})
}

// sendItemDone emits conversation.item.done (GA only; beta clients do not get it).
func (s *Session) sendItemDone(it *item, epoch int) {
	s.send(Event{Epoch: epoch, Payload: protocol.ConversationItemDone{
		PreviousItemID: s.previousItemID(it), Item: it.item()}})
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
