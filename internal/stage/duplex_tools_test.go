package stage

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
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
	spec := &duplex.ToolSpec{Tools: []duplex.Tool{weather}, Choice: duplex.ToolChoiceFunction, Function: weather.Name}
	for seed := range 100 {
		sink := newRecSink(t)
		d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{MaxTokens: 200}, RequestID: fmt.Sprintf("duplex-tools-%d", seed), Sampling: gpu.Sampling{Temperature: 1, TopP: 1, Seed: uint32(seed)}}, sink)
		require.NoError(t, err)
		require.NoError(t, d.AppendText(context.Background(), 0, "user", "what is the weather in Paris?"))
		_, err = d.RespondWith(context.Background(), 0, duplex.ResponseSpec{Tools: spec})
		require.NoError(t, err)
		require.True(t, sink.waitFor(60*time.Second, finishedTurn(1)), "seed %d", seed)
		outs, _, _ := sink.snapshot()
		calls := ofKind(outs, duplex.OutToolCall)
		require.Len(t, calls, 1, "seed %d", seed)
		require.Empty(t, ofKind(outs, duplex.OutText), "seed %d: the call's markup is never text", seed)
		c := calls[0].ToolCall
		require.Equal(t, weather.Name, c.Name)
		require.True(t, strings.HasPrefix(c.ID, "call_"))
		var args any
		require.NoError(t, json.Unmarshal([]byte(c.Arguments), &args), "seed %d: %s", seed, c.Arguments)
		require.NoError(t, validateSchema(schema, args), "seed %d: %s", seed, c.Arguments)
		fin := ofKind(outs, duplex.OutFinished)
		require.Len(t, fin, 1)
		require.Equal(t, duplex.FinishToolCalls, fin[0].FinishReason, "seed %d", seed)
		if seed == 0 {
			require.NoError(t, d.AppendText(context.Background(), 0, "tool", `{"temperature":21}`))
			_, err = d.RespondWith(context.Background(), 0, duplex.ResponseSpec{MaxTokens: 6, Tools: &duplex.ToolSpec{Choice: duplex.ToolChoiceNone}})
			require.NoError(t, err)
			waitResponseEnd(t, sink, 2)
			outs, _, _ = sink.snapshot()
			require.Len(t, ofKind(outs, duplex.OutToolCall), 1, "tool_choice none: no second call")
			d.conv.mu.Lock()
			hist := append([]gpu.ChatMessage(nil), d.conv.history...)
			d.conv.mu.Unlock()
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
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{MaxTokens: 4}, RequestID: "duplex-settools"}, newRecSink(t))
	require.NoError(t, err)
	defer d.Close()
	spec := &duplex.ToolSpec{Tools: testTools()[1:2], Choice: duplex.ToolChoiceAuto}
	require.NoError(t, d.SetTools(spec))
	require.NoError(t, d.SetTools(spec))
	decl := p.toolFormat().toolsInstructions(spec.Tools)
	n := 0
	d.conv.mu.Lock()
	for _, m := range d.conv.history {
		if m.Role == "system" && m.Content == decl {
			n++
		}
	}
	d.conv.mu.Unlock()
	require.Equal(t, 1, n)
	require.Nil(t, d.conv.toolsDeclaration(spec), "declared in the conversation")
	require.NotNil(t, d.conv.toolsDeclaration(&duplex.ToolSpec{Tools: testTools()[2:], Choice: duplex.ToolChoiceAuto}), "other tools are declared per response")
	require.NotNil(t, d.conv.toolSpec())
	require.NoError(t, d.SetTools(&duplex.ToolSpec{Tools: spec.Tools, Choice: duplex.ToolChoiceNone}))
	require.Nil(t, d.conv.toolSpec(), "tool_choice none: the stream's turns call nothing")
}

// seqTokens is how many tokens the stream's sequence holds and how many the rendering of its
// history has (the two differ by a few tokens at most where deltas were tokenized apart).
func seqTokens(t *testing.T, d *DuplexStream) (held, rendered int) {
	t.Helper()
	d.conv.mu.Lock()
	hist := append([]gpu.ChatMessage(nil), d.conv.history...)
	d.conv.mu.Unlock()
	prompt, err := d.p.deps.Engine.ChatPrompt(hist, false)
	require.NoError(t, err)
	n, _, err := d.p.deps.Engine.CountTokens(prompt, 1<<20)
	require.NoError(t, err)
	return d.conv.seq.HistoryLen(), n
}

// declarations counts the tools declarations of specs in the stream's history.
func declarations(d *DuplexStream, specs ...[]duplex.Tool) []int {
	d.conv.mu.Lock()
	defer d.conv.mu.Unlock()
	var out []int
	for _, tools := range specs {
		decl := d.p.toolFormat().toolsInstructions(tools)
		n := 0
		for _, m := range d.conv.history {
			if m.Role == "system" && m.Content == decl {
				n++
			}
		}
		out = append(out, n)
	}
	return out
}

// The session's tools are read into the conversation's sequence when they are set, not by the
// next response: the first turn's response prefills only its generation prompt, as a later
// turn's does, and the declaration's prefill is a row of its own, before the response.
func TestDuplexToolsPrefilledBeforeTheTurn(t *testing.T) {
	p, _ := newTestPipeline(t, nil)
	sink := newRecSink(t)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{MaxTokens: 4}, RequestID: "duplex-tools-prefill"}, sink)
	require.NoError(t, err)
	defer d.Close()
	ctx := context.Background()
	tools := testTools()[1:]
	require.NoError(t, d.SetTools(&duplex.ToolSpec{Tools: tools, Choice: duplex.ToolChoiceAuto}))
	declTokens := 0
	own := map[int]int{} // turn → tokens its response prefilled itself
	for i, text := range []string{"go forward ten meters", "and then turn left"} {
		// At once, no wait: the declaration's job is queued before the user's message.
		require.NoError(t, d.AppendText(ctx, 0, "user", text))
		turn, err := d.RespondWith(ctx, 0, duplex.ResponseSpec{Tools: d.conv.toolSpec()})
		require.NoError(t, err)
		require.Equal(t, i+1, turn)
		for _, m := range sink.waitTurnEnd(t, turn, 30*time.Second) {
			if m.StageID != 0 || m.Turn != turn {
				continue
			}
			if m.Metrics.NumTokensOut > 0 {
				own[turn] = m.Metrics.NumTokensIn
			} else if turn == 1 {
				declTokens = max(declTokens, m.Metrics.NumTokensIn)
			}
		}
	}
	require.Equal(t, own[2], own[1], "the first response reads what a later one does, no declaration")
	require.Less(t, own[1], 10)
	require.Greater(t, declTokens, 100, "the declaration's own prefill row, billed to the first turn")
	require.Equal(t, []int{1}, declarations(d, tools))
}

// Changed tools replace the declaration where it was, in the history and in the sequence: the
// old declaration's tokens leave the KV cache (rolled back, the conversation after it
// prefilled again), so the model never reads tools it may no longer call. Tools set to none
// remove the declaration the same way.
func TestDuplexToolsChangeReplacesTheDeclaration(t *testing.T) {
	p, _ := newTestPipeline(t, nil)
	sink := newRecSink(t)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{MaxTokens: 6}, RequestID: "duplex-tools-change"}, sink)
	require.NoError(t, err)
	defer d.Close()
	ctx := context.Background()
	big, small := testTools()[1:], testTools()[2:]
	require.NoError(t, d.SetTools(&duplex.ToolSpec{Tools: big, Choice: duplex.ToolChoiceAuto}))
	require.NoError(t, d.AppendText(ctx, 0, "user", "go forward ten meters"))
	_, err = d.RespondWith(ctx, 0, duplex.ResponseSpec{Tools: d.conv.toolSpec()})
	require.NoError(t, err)
	sink.waitTurnEnd(t, 1, 30*time.Second)
	before, _ := seqTokens(t, d)

	require.NoError(t, d.SetTools(&duplex.ToolSpec{Tools: small, Choice: duplex.ToolChoiceAuto}))
	require.NoError(t, d.SettleInput(ctx, 0)) // the tools job ran once the marker is reported
	waitSettled(t, sink, 2)
	require.Equal(t, []int{0, 1}, declarations(d, big, small), "the old declaration is gone, the new one there once")
	d.conv.mu.Lock()
	first := d.conv.history[0]
	d.conv.mu.Unlock()
	require.Equal(t, p.toolFormat().toolsInstructions(small), first.Content, "in the old one's place, before the conversation")
	held, rendered := seqTokens(t, d)
	require.InDelta(t, rendered, held, 4, "the sequence holds the history, no stale declaration (held %d, was %d)", held, before)
	require.Less(t, held, before, "a smaller declaration: fewer tokens than before")

	// The conversation goes on over the new declaration.
	require.NoError(t, d.AppendText(ctx, 0, "user", "and then turn left"))
	_, err = d.RespondWith(ctx, 0, duplex.ResponseSpec{Tools: d.conv.toolSpec()})
	require.NoError(t, err)
	require.True(t, sink.waitFor(30*time.Second, finishedTurn(2)))
	require.Equal(t, []int{0, 1}, declarations(d, big, small))

	require.NoError(t, d.SetTools(nil))
	require.NoError(t, d.SettleInput(ctx, 0))
	waitSettled(t, sink, 3)
	require.Equal(t, []int{0, 0}, declarations(d, big, small), "no tools: no declaration")
	held, rendered = seqTokens(t, d)
	require.InDelta(t, rendered, held, 4, "the sequence holds the history without any declaration")
}

// waitSettled waits for SettleInput's report of turn n: every job queued before it has run.
func waitSettled(t *testing.T, sink *recSink, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for _, e := range sink.ends {
			if e.Turn == n && e.InputSettled {
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond, "input of turn %d settled", n)
}

// waitResponseEnd waits for response n's end (not a SettleInput report naming the same turn).
// A reply enters the history after its Finished output and before its turn's end.
func waitResponseEnd(t *testing.T, sink *recSink, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for _, e := range sink.ends {
			if e.Turn == n && !e.InputSettled {
				return true
			}
		}
		return false
	}, 60*time.Second, 5*time.Millisecond, "response %d ended", n)
}

// When the conversation outgrew its window since the declaration went in and its oldest turns
// were dropped (session.truncation "auto"), the sequence was forgotten after the instructions and
// the declaration went in again where it is in the history, with a fresh mark: a change of tools
// then takes the old declaration's place, nothing of the old one stays, and the conversation
// goes on without an error.
func TestDuplexToolsChangeAfterTruncation(t *testing.T) {
	p, eng := newTestPipeline(t, nil)
	sink := newRecSink(t)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{MaxTokens: 4}, RequestID: "duplex-tools-trunc"}, sink)
	require.NoError(t, err)
	defer d.Close()
	ctx := context.Background()
	big, small := testTools()[1:], testTools()[2:]
	require.NoError(t, d.SetTools(&duplex.ToolSpec{Tools: big, Choice: duplex.ToolChoiceAuto}))
	// Turns of input that together outgrow the window: the oldest are dropped.
	chunk := strings.Repeat("go forward ten meters and then turn left. ", eng.Info().SeqContext/60)
	n := 10
	// Each turn is prefilled before the next comes (settled one by one), so the drops happen at
	// the same points in every run, whatever the scheduling.
	for i := range n {
		require.NoError(t, d.AppendText(ctx, i+1, "user", chunk))
		require.NoError(t, d.SettleInput(ctx, i+1))
		waitSettled(t, sink, i+1)
	}
	// The drop's output and the settle report reach the sink on their own paths.
	require.Eventually(t, func() bool {
		outs, _, _ := sink.snapshot()
		return len(ofKind(outs, duplex.OutTruncated)) > 0
	}, 30*time.Second, 5*time.Millisecond, "the oldest turns were dropped")

	require.NoError(t, d.SetTools(&duplex.ToolSpec{Tools: small, Choice: duplex.ToolChoiceAuto}))
	require.NoError(t, d.AppendText(ctx, n+1, "user", "and stop"))
	_, err = d.RespondWith(ctx, n+1, duplex.ResponseSpec{Tools: d.conv.toolSpec()})
	require.NoError(t, err)
	waitResponseEnd(t, sink, n+1)
	outs, _, _ := sink.snapshot()
	require.Empty(t, ofKind(outs, duplex.OutError))
	require.Equal(t, []int{0, 1}, declarations(d, big, small))
	d.conv.mu.Lock()
	hist := append([]gpu.ChatMessage(nil), d.conv.history...)
	fed := d.conv.fedText
	d.conv.mu.Unlock()
	decl := p.toolFormat().toolsInstructions(small)
	require.Equal(t, decl, hist[0].Content, "the new declaration took the old one's place")
	require.NotContains(t, fed, p.toolFormat().toolsInstructions(big), "nothing of the old declaration is in the sequence")
	require.Equal(t, "and stop", hist[len(hist)-2].Content)
	require.Equal(t, "assistant", hist[len(hist)-1].Role)
}
