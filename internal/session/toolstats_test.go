package session

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
)

// A function call is timed from its arguments (response.function_call_arguments.done) to the
// client's function_call_output, on the statistics clock, and handed to the turn of the next
// response (the follow-up that reads the output), not to the turn that made the call.
func TestFunctionCallTimedForTheFollowUp(t *testing.T) {
	eng := &callEngine{t: t, args: `{"order_id":"42"}`}
	var now atomic.Int64 // the statistics clock, in ms
	now.Store(1_000_000)
	clock := func() float64 { return float64(now.Load()) / 1000 }
	m := NewManager(ManagerConfig{MaxSessions: 1, WallClock: clock}, &callBackend{eng}, zap.NewNop())
	sk := &sink{ch: make(chan Event, 1024)}
	patch := manual16k
	patch.Modalities = []string{"text"}
	patch.ToolsSet = true
	patch.Tools = []duplex.Tool{{Name: "lookup_order"}}
	s, wait := runSession(t, m, Options{Duplex: true}, sk, patch)
	require.NoError(t, s.Submit(context.Background(), &CreateItem{ItemID: "u1", Role: "user", Text: "where is 42?"}))
	sk.until(t, "conversation.item.done")
	require.NoError(t, s.Submit(context.Background(), &CreateResponse{ToolChoice: &ToolChoice{Mode: duplex.ToolChoiceFunction, Function: "lookup_order"}}))
	sk.until(t, "response.function_call_arguments.done")
	sk.until(t, "response.done")
	eng.mu.Lock()
	require.Empty(t, eng.turnCalls, "the turn that made the call has no call timed")
	eng.mu.Unlock()

	now.Add(1250) // the client runs the function for 1.25 s
	require.NoError(t, s.Submit(context.Background(), &CreateItem{ItemType: "function_call_output", CallID: "call_1", Output: `{"ok":true}`}))
	sk.until(t, "conversation.item.done")
	now.Add(300) // and asks for the follow-up later
	require.NoError(t, s.Submit(context.Background(), &CreateResponse{}))
	sk.until(t, "response.done")
	s.Stop(ReasonClientClose)
	require.Equal(t, ReasonClientClose, wait())
	eng.mu.Lock()
	defer eng.mu.Unlock()
	require.Equal(t, []metrics.ToolCallStats{{Kind: metrics.ToolKindFunction, Name: "lookup_order", CallID: "call_1",
		Start: 1000, DurationMs: 1250}}, eng.turnCalls)
}

// An MCP call's figures go to the turn of the response that ran it: its server, tool, item
// id, when it started and how long it took (the wall time around the server's answer).
func TestMCPCallTimedForItsTurn(t *testing.T) {
	eng := &callEngine{t: t, args: `{"a":2,"b":3}`}
	s, sk, wait := callSession(t, eng, "never")
	before := float64(time.Now().UnixNano()) / 1e9
	require.NoError(t, s.Submit(context.Background(), forceMCP("add")))
	item := sk.until(t, "response.mcp_call.completed").wire()["item_id"].(string)
	first := sk.until(t, "response.done")
	eng.mu.Lock()
	require.Len(t, eng.turnCalls, 1, "handed over when the response ended")
	c := eng.turnCalls[0]
	eng.mu.Unlock()
	after := float64(time.Now().UnixNano()) / 1e9
	require.Equal(t, metrics.ToolKindMCP, c.Kind)
	require.Equal(t, "srv", c.ServerLabel)
	require.Equal(t, "add", c.Name)
	require.Equal(t, item, c.CallID)
	require.Empty(t, c.Error)
	require.Positive(t, c.DurationMs)
	require.GreaterOrEqual(t, c.Start, before)
	require.LessOrEqual(t, c.Start+c.DurationMs/1000, after)
	require.NotEmpty(t, first.wire()["response_id"])
	sk.until(t, "response.done") // the follow-up: no call of its own
	s.Stop(ReasonClientClose)
	require.Equal(t, ReasonClientClose, wait())
	eng.mu.Lock()
	require.Len(t, eng.turnCalls, 1)
	eng.mu.Unlock()
}
