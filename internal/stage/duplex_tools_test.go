package stage

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/gpu"
)

// A realtime session's forced call, on the duplex stream of a real pipeline: for 100 of 100
// seeds the reply is exactly one call of the named function whose arguments are valid against
// its schema, none of its text is released as Text (so none reaches the talker), and the turn
// finishes with tool_calls. The first seed's conversation then continues from the call's
// result with the response's own tool_choice none.
func TestDuplexForcedToolCall(t *testing.T) {
	p, _ := newTestPipeline(t, nil)
	// One small tool: the dummy model's tokens are about a character each, and the test
	// engine's sequences hold 1024 of them (the declaration, the conversation and the reply).
	weather := testTools()[2]
	var schema map[string]any
	require.NoError(t, json.Unmarshal(weather.Parameters, &schema))
	spec := &ToolSpec{Tools: []Tool{weather}, Choice: ToolChoiceFunction, Function: weather.Name}
	for seed := range 100 {
		sink := newRecSink(t)
		d, err := p.OpenDuplex(context.Background(), DuplexOptions{RequestID: fmt.Sprintf("duplex-tools-%d", seed), MaxTokens: 200,
			Sampling: gpu.Sampling{Temperature: 1, TopP: 1, Seed: uint32(seed)}}, sink)
		require.NoError(t, err)
		require.NoError(t, d.AppendText(context.Background(), 0, "user", "what is the weather in Paris?"))
		_, err = d.RespondWith(context.Background(), 0, ResponseSpec{Tools: spec})
		require.NoError(t, err)
		require.True(t, sink.waitFor(60*time.Second, finishedTurn(1)), "seed %d", seed)
		outs, _, _ := sink.snapshot()
		calls := ofKind(outs, ToolCalled)
		require.Len(t, calls, 1, "seed %d", seed)
		require.Empty(t, ofKind(outs, Text), "seed %d: the call's markup is never text", seed)
		c := calls[0].ToolCall
		require.Equal(t, weather.Name, c.Name)
		require.True(t, strings.HasPrefix(c.ID, "call_"))
		var args any
		require.NoError(t, json.Unmarshal([]byte(c.Arguments), &args), "seed %d: %s", seed, c.Arguments)
		require.NoError(t, validateSchema(schema, args), "seed %d: %s", seed, c.Arguments)
		fin := ofKind(outs, Finished)
		require.Len(t, fin, 1)
		require.Equal(t, FinishToolCalls, fin[0].FinishReason, "seed %d", seed)
		if seed == 0 {
			require.NoError(t, d.AppendText(context.Background(), 0, "tool", `{"temperature":21}`))
			_, err = d.RespondWith(context.Background(), 0, ResponseSpec{MaxTokens: 6, Tools: &ToolSpec{Choice: ToolChoiceNone}})
			require.NoError(t, err)
			require.True(t, sink.waitFor(60*time.Second, finishedTurn(2)))
			outs, _, _ = sink.snapshot()
			require.Len(t, ofKind(outs, ToolCalled), 1, "tool_choice none: no second call")
			d.mu.Lock()
			hist := append([]gpu.ChatMessage(nil), d.history...)
			d.mu.Unlock()
			require.GreaterOrEqual(t, len(hist), 3)
			require.Contains(t, hist[1].Content, "<tool_call>", "the call stays in the conversation")
			require.Contains(t, hist[1].Content, c.Arguments)
			require.Contains(t, hist[2].Content, "<tool_response>\n{\"temperature\":21}", "its result follows")
		}
		d.Close()
	}
}

// The stream's own tools are declared once, in the conversation, so that the KV cache keeps
// the declaration; setting the same tools again adds nothing, and a response with them reads
// no declaration of its own.
func TestDuplexSetToolsDeclaresOnce(t *testing.T) {
	p, _ := newTestPipeline(t, nil)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{RequestID: "duplex-settools", MaxTokens: 4}, newRecSink(t))
	require.NoError(t, err)
	defer d.Close()
	spec := &ToolSpec{Tools: testTools()[1:2], Choice: ToolChoiceAuto}
	require.NoError(t, d.SetTools(spec))
	require.NoError(t, d.SetTools(spec))
	decl := p.toolFormat().toolsInstructions(spec.Tools)
	n := 0
	d.mu.Lock()
	for _, m := range d.history {
		if m.Role == "system" && m.Content == decl {
			n++
		}
	}
	d.mu.Unlock()
	require.Equal(t, 1, n)
	require.Nil(t, d.toolsDeclaration(spec), "declared in the conversation")
	require.NotNil(t, d.toolsDeclaration(&ToolSpec{Tools: testTools()[2:], Choice: ToolChoiceAuto}), "other tools are declared per response")
	require.NotNil(t, d.toolSpec())
	require.NoError(t, d.SetTools(&ToolSpec{Tools: spec.Tools, Choice: ToolChoiceNone}))
	require.Nil(t, d.toolSpec(), "tool_choice none: the stream's turns call nothing")
}
