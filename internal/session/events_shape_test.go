package session

import (
	"context"
	"encoding/json"
	"github.com/omniserve/omniserve/internal/duplex"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// A forced function call: the events tools.go still builds as maps (output item added / done,
// function_call_arguments delta / done, conversation.item.done) have their protocol types'
// shape (sink.until checks each one), and response.done lists the function_call item.
func TestFunctionCallEventsHaveTheirProtocolShape(t *testing.T) {
	eng := &callEngine{t: t, args: `{"city":"Paris"}`}
	m := NewManager(ManagerConfig{MaxSessions: 1}, &callBackend{eng}, zap.NewNop())
	sk := &sink{ch: make(chan Event, 1024)}
	patch := manual16k
	patch.Modalities = []string{"text"}
	s, wait := runSession(t, m, Options{Duplex: true}, sk, patch)
	ctx := context.Background()
	require.NoError(t, s.Submit(ctx, &UpdateSession{Patch: ConfigPatch{ToolsSet: true, Tools: []duplex.Tool{
		{Name: "get_weather", Description: "the weather", Parameters: json.RawMessage(`{"type":"object"}`)}}}}))
	sk.until(t, "session.updated")
	require.NoError(t, s.Submit(ctx, &CreateItem{ItemID: "u1", Role: "user", Text: "weather?"}))
	sk.until(t, "conversation.item.done")
	require.NoError(t, s.Submit(ctx, &CreateResponse{ToolChoice: &ToolChoice{Mode: duplex.ToolChoiceFunction, Function: "get_weather"}}))
	for _, typ := range []string{"response.output_item.added", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "conversation.item.done", "response.output_item.done"} {
		sk.until(t, typ)
	}
	done := effectOf[ResponseDone](t, sk.until(t, "response.done"))
	var call *Item
	for i, it := range done.Response.Output {
		if it.Type == "function_call" {
			call = &done.Response.Output[i]
		}
	}
	require.NotNil(t, call, "response.done lists the call")
	require.Equal(t, "get_weather", call.Name)
	require.JSONEq(t, `{"city":"Paris"}`, call.Arguments)
	s.Stop(ReasonClientClose)
	require.Equal(t, ReasonClientClose, wait())
}
