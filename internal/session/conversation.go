package session

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

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
	// Turn is the input turn the item was added in (conversation.turn then; 0: none): the
	// engine's truncation drops whole turns and the session deletes their items
	// (truncation.go).
	Turn int
}

func newItemID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "item_" + hex.EncodeToString(b[:])
}

// item is the item as the client sees it now: a copy, which the session's later changes do not
// reach.
func (it *item) item() Item {
	v := Item{ID: it.ID, Type: it.Type, Role: it.Role, Status: it.Status, Text: it.Text, Audio: it.Audio,
		Transcript: it.Transcript, CallID: it.CallID, Name: it.Name, Arguments: it.Arguments, Output: it.Output,
		ServerLabel: it.ServerLabel, MCPTools: it.MCPTools}
	if m := it.MCP; m != nil {
		v.MCP = MCPItem{Output: m.Output, Error: m.Error, ApprovalRequestID: m.ApprovalRequestID, Approve: m.Approve, Reason: m.Reason}
	}
	return v
}

// conversation is the session's item list: the order the client sees (previous_item_id),
// lookups by item and call id, insertion, removal, truncation and the history budget. It
// sends nothing and never touches the engine: the session announces what changed and tells
// the engine. Owned by the actor like the rest of the session's state.
type conversation struct {
	items []*item
	// turn is the session's input turn now (Session.input), which the items inserted get.
	turn int
}

// find is the item with id, or nil.
func (c *conversation) find(id string) *item {
	for _, it := range c.items {
		if it.ID == id {
			return it
		}
	}
	return nil
}

// freshID is want when it names no item yet, otherwise a new id: an id announced ahead (by
// speech_started) that the conversation took meanwhile is not reused.
func (c *conversation) freshID(want string) string {
	if want == "" || c.find(want) != nil {
		return newItemID()
	}
	return want
}

// lastID is the id of the newest item, or nil for an empty conversation.
func (c *conversation) lastID() *string {
	if len(c.items) == 0 {
		return nil
	}
	return &c.items[len(c.items)-1].ID
}

// previousID is the id of the item before it in the conversation, or nil.
func (c *conversation) previousID(it *item) *string {
	for i, x := range c.items {
		if x == it {
			if i == 0 {
				return nil
			}
			id := c.items[i-1].ID
			return &id
		}
	}
	return nil
}

// hasPrevious reports whether prev is a place insert accepts: "" (the end), "root" or an item.
func (c *conversation) hasPrevious(prev string) bool {
	return prev == "" || prev == "root" || c.find(prev) != nil
}

// insert adds it after the item prev ("" = at the end, "root" = first); false when prev
// does not exist.
func (c *conversation) insert(it *item, prev string) bool {
	if it.Turn == 0 {
		it.Turn = c.turn
	}
	switch prev {
	case "":
		c.items = append(c.items, it)
		return true
	case "root":
		c.items = append([]*item{it}, c.items...)
		return true
	}
	for i, x := range c.items {
		if x.ID == prev {
			c.items = append(c.items[:i+1], append([]*item{it}, c.items[i+1:]...)...)
			return true
		}
	}
	return false
}

// remove deletes the item with id; false when there is none.
func (c *conversation) remove(id string) bool {
	for i, it := range c.items {
		if it.ID == id {
			c.items = append(c.items[:i], c.items[i+1:]...)
			return true
		}
	}
	return false
}

// findCall is the function_call item of call id, or nil.
func (c *conversation) findCall(callID string) *item {
	for _, it := range c.items {
		if it.Type == "function_call" && it.CallID == callID {
			return it
		}
	}
	return nil
}

// callOutput is the function_call_output item answering call id, or nil.
func (c *conversation) callOutput(callID string) *item {
	for _, it := range c.items {
		if it.Type == "function_call_output" && it.CallID == callID {
			return it
		}
	}
	return nil
}

// views is every item as the client sees it, in order (session.resumed's resync).
func (c *conversation) views() []Item {
	out := make([]Item, 0, len(c.items))
	for _, it := range c.items {
		out = append(out, it.item())
	}
	return out
}

// audioTokens is the equivalent audio tokens of every item (a response's context).
func (c *conversation) audioTokens() int {
	n := 0
	for _, it := range c.items {
		n += it.audioTokens()
	}
	return n
}

// trim drops the oldest items while their text (itemBytes) exceeds limit, keeping the newest
// item and the item keep (the active response's; "" = none), and returns what it dropped, oldest
// first.
func (c *conversation) trim(limit int, keep string) []*item {
	total := 0
	for _, it := range c.items {
		total += itemBytes(it)
	}
	var dropped []*item
	for total > limit && len(c.items) > 1 {
		i := 0
		if keep != "" && c.items[0].ID == keep {
			i = 1
		}
		if i >= len(c.items)-1 {
			break
		}
		it := c.items[i]
		c.items = append(c.items[:i], c.items[i+1:]...)
		total -= itemBytes(it)
		dropped = append(dropped, it)
	}
	return dropped
}

// itemBytes is what an item holds of the conversation's text.
func itemBytes(it *item) int { return len(it.Text) + len(it.Transcript) }

// truncateSlackMs is how far past the audio sent a truncate may point and still be taken as
// "truncate at the end": client playback clocks overshoot (pipecat measured ~85 ms).
const truncateSlackMs = 250

// truncateError is a refused conversation.item.truncate: its error code, message and param.
type truncateError struct{ code, message, param string }

// truncate cuts the assistant audio item itemID after endMs, as OpenAI does: the audio after
// the cut is gone and so is the item's transcript. length is the audio the item has (for the
// active response, what was sent so far; < 0 = the item's own AudioMs). It returns the cut
// position (endMs, at most length) or why not.
func (c *conversation) truncate(itemID string, contentIndex int, endMs, length float64) (float64, *truncateError) {
	it := c.find(itemID)
	if it == nil {
		return 0, &truncateError{"item_truncate_invalid_item_id", fmt.Sprintf("Error truncating item: the item with id '%s' does not exist.", itemID), "item_id"}
	}
	if it.Role != "assistant" || !it.Audio {
		return 0, &truncateError{"invalid_value", "Only model output audio messages can be truncated", "item_id"}
	}
	if contentIndex != 0 {
		return 0, &truncateError{"invalid_value", fmt.Sprintf("content_index %d does not exist (the item has one audio part, index 0)", contentIndex), "content_index"}
	}
	if length < 0 {
		length = it.AudioMs
	}
	if endMs > length+truncateSlackMs {
		return 0, &truncateError{"invalid_value", fmt.Sprintf("Audio content of %.0fms is already shorter than %.0fms", length, endMs), "audio_end_ms"}
	}
	endMs = min(endMs, length)
	it.AudioMs = endMs
	it.Text = ""
	it.Truncated = true
	return endMs, nil
}

// added is the effect of it added to the conversation, in epoch; model marks it model output.
func (c *conversation) added(it *item, epoch int, model bool) Event {
	return Event{Epoch: epoch, Model: model, Effect: ConversationItem{Phase: PhaseAdded,
		PreviousItemID: c.previousID(it), Item: it.item()}}
}

// done is the effect of it done in the conversation.
func (c *conversation) done(it *item, epoch int, model bool) Event {
	return Event{Epoch: epoch, Model: model, Effect: ConversationItem{Phase: PhaseDone,
		PreviousItemID: c.previousID(it), Item: it.item()}}
}

// deleteItem is conversation.item.delete: the item removed and announced, or the error effect
// of an unknown id.
func (c *conversation) deleteItem(cmd *DeleteItem, epoch int) Event {
	if !c.remove(cmd.ItemID) {
		return errorEvent(epoch, "item_delete_invalid_item_id", fmt.Sprintf("Error deleting item: the item with id '%s' does not exist.", cmd.ItemID), cmd.ID, "item_id")
	}
	return Event{Epoch: epoch, Effect: ItemDeleted{ItemID: cmd.ItemID}}
}

// retrieveItem is conversation.item.retrieve: the item as the client sees it, or the error
// effect of an unknown id.
func (c *conversation) retrieveItem(cmd *RetrieveItem, epoch int) Event {
	it := c.find(cmd.ItemID)
	if it == nil {
		return errorEvent(epoch, "item_retrieve_invalid_item_id", fmt.Sprintf("Error retrieving item: the item with id '%s' does not exist.", cmd.ItemID), cmd.ID, "item_id")
	}
	return Event{Epoch: epoch, Effect: ConversationItem{Phase: PhaseRetrieved, Item: it.item()}}
}

// commitAudio adds the committed user audio (audioMs of it, committed at now on the statistics
// clock) as an item, under the id speech_started announced (want) if it is still free, and
// returns the item with its effects: input_audio_buffer.committed, conversation.item.added and
// conversation.item.done. The transcript follows with transcription.completed.
func (c *conversation) commitAudio(want string, audioMs, now float64, epoch int) (*item, []Event) {
	it := &item{ID: c.freshID(want), Role: "user", Type: "message", Status: "completed", Audio: true, AudioMs: audioMs, CommittedAt: now}
	prev := c.lastID()
	c.insert(it, "")
	return it, []Event{{Epoch: epoch, Effect: InputCommitted{PreviousItemID: prev, ItemID: it.ID}},
		c.added(it, epoch, false), c.done(it, epoch, false)}
}
