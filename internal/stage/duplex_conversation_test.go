package stage

import (
	"context"
	"github.com/omniserve/omniserve/internal/duplex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/gpu"
)

// The conversation's tests run without the engine: no sequence (as with a remote thinker), a
// pipeline with only its thinker's places, and the job queue read by the test instead of the
// sequence goroutine.

// newTestConversation returns a conversation whose Sink is a recSink and whose jobs the test
// reads; Close them with the returned stop.
func newTestConversation(t *testing.T, opts DuplexOptions) (*conversation, chan seqJob, *recSink) {
	t.Helper()
	p := &Pipeline{thinker: newSlots(1, 8), log: zap.NewNop()}
	sink := newRecSink(t)
	disp := newDispatcher(sink, 16)
	go disp.run()
	ctx, cancel := context.WithCancel(context.Background())
	jobs := make(chan seqJob, 4)
	if opts.RequestID == "" {
		opts.RequestID = "conv"
	}
	if opts.MaxTokens == 0 {
		opts.MaxTokens = 8
	}
	c := newConversation(ctx, p, opts, disp, nil, jobs)
	t.Cleanup(func() {
		cancel()
		disp.close()
		<-disp.done
	})
	return c, jobs, sink
}

func TestTurnIDs(t *testing.T) {
	type step struct {
		given  int // the caller's id (<= 0: keep), or
		answer int // a response started for this turn (when > 0)
		want   int // input afterwards
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"the caller numbers", []step{{given: 1, want: 1}, {given: 2, want: 2}, {given: 0, want: 2}}},
		{"an answered id is the next turn's", []step{{given: 1, want: 1}, {answer: 1, want: 2}, {given: 1, want: 2}, {given: 3, want: 3}}},
		{"ids never go back below an answer", []step{{given: 5, want: 5}, {answer: 5, want: 6}, {given: 2, want: 6}}},
		{"a later answer moves input", []step{{answer: 3, want: 4}, {answer: 2, want: 4}}},
	}
	for _, tc := range cases {
		ids := turnIDs{input: 1}
		for i, s := range tc.steps {
			if s.answer > 0 {
				ids.answer(s.answer)
			} else {
				ids.given(s.given)
			}
			require.Equal(t, s.want, ids.input, "%s: step %d", tc.name, i)
		}
	}
}

// TestConversationAddMessage: a message joins the history and queues its prefill under the
// turn it is input of; a full queue does not block (a queued job syncs the whole history).
func TestConversationAddMessage(t *testing.T) {
	c, jobs, _ := newTestConversation(t, DuplexOptions{})
	require.NoError(t, c.addMessage(0, "user", "one"))
	require.NoError(t, c.addMessage(3, "user", "two"))
	require.Equal(t, seqJob{turn: 1}, <-jobs)
	require.Equal(t, seqJob{turn: 3}, <-jobs)
	for range cap(jobs) + 2 {
		require.NoError(t, c.addMessage(0, "user", "more"))
	}
	require.Len(t, c.history, 2+cap(jobs)+2)
	c.close()
	require.ErrorIs(t, c.addMessage(0, "user", "late"), ErrClosed)
}

// TestConversationAnswer: the listen/speak decision at an audio unit's endpoints. Each
// transcript goes out and joins the history, a response is queued for its turn, and the
// decision speaks for the last one; with none it listens.
func TestConversationAnswer(t *testing.T) {
	cases := []struct {
		name       string
		opts       DuplexOptions
		texts      []string
		wantTurn   int // the decision's turn
		wantSpeak  bool
		wantHist   []string
		wantStarts int
	}{
		{"no endpoint: listen", DuplexOptions{}, nil, 1, false, nil, 0},
		{"one endpoint", DuplexOptions{}, []string{"hello"}, 1, true, []string{"hello"}, 1},
		{"two endpoints in one unit", DuplexOptions{}, []string{"one", "two"}, 2, true, []string{"one", "two"}, 2},
		{"an empty transcript is answered, not added", DuplexOptions{}, []string{""}, 1, true, nil, 1},
		{"transcribe only keeps no history", DuplexOptions{Options: duplex.Options{TranscribeOnly: true}}, []string{"hi"}, 1, true, nil, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, jobs, sink := newTestConversation(t, tc.opts)
			var eps []endpoint
			for _, text := range tc.texts {
				eps = append(eps, endpoint{tr: duplex.Transcription{Text: text}})
			}
			decision := OutputMessage{Output: duplex.Output{Kind: duplex.OutDecision, Turn: c.upcoming(), Decision: duplex.DecisionListen}}
			confirmed, err := c.answer(context.Background(), eps, &decision, 0)
			require.NoError(t, err)
			require.Empty(t, confirmed)
			require.Equal(t, tc.wantSpeak, decision.Decision == duplex.DecisionSpeak)
			require.Equal(t, tc.wantTurn, decision.Turn)
			var hist []string
			for _, m := range c.history {
				hist = append(hist, m.Content)
			}
			require.Equal(t, tc.wantHist, hist)
			starts := 0
			for len(jobs) > 0 {
				if j := <-jobs; j.ts != nil {
					starts++
					require.Equal(t, 8, j.maxTokens, "the stream's max_tokens")
				}
			}
			require.Equal(t, tc.wantStarts, starts)
			require.Len(t, c.live, tc.wantStarts)
			require.Equal(t, tc.wantTurn+boolInt(tc.wantSpeak), c.upcoming(), "input after an answer is the next turn's")
			require.True(t, sink.waitFor(5*time.Second, func(outs []OutputMessage) bool { return len(ofKind(outs, duplex.OutTranscript)) == len(tc.texts) }))
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestConversationSpeculation: a speculation answers its endpoint only while the conversation
// is as it was; confirmed, it is the turn; dropped, its turn never existed.
func TestConversationSpeculation(t *testing.T) {
	cases := []struct {
		name      string
		before    func(c *conversation) // what happens between start and endpoint
		wantSpec  bool                  // still pending at the endpoint
		wantStart bool
	}{
		{"confirmed", func(*conversation) {}, true, true},
		{"a message drops it", func(c *conversation) { _ = c.addMessage(0, "user", "typed") }, false, true},
		{"speech resumed drops it", func(c *conversation) { c.dropSpecIfResumed(0, 1000) }, false, true},
		{"a pause of the same speech keeps it", func(c *conversation) { c.dropSpecIfResumed(300, 1000) }, true, true},
		{"tools: no speculation", nil, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, jobs, sink := newTestConversation(t, DuplexOptions{})
			if tc.before == nil {
				c.tools = &duplex.ToolSpec{}
			}
			c.startSpeculation("go forward", 1000)
			if !tc.wantStart {
				require.Nil(t, c.spec)
				require.Empty(t, jobs)
				return
			}
			j := <-jobs
			require.NotNil(t, j.spec)
			require.Same(t, j.spec, c.spec)
			tc.before(c)
			sp := c.takeSpec()
			if !tc.wantSpec {
				require.Nil(t, sp)
				require.False(t, <-j.spec.verdict, "discarded")
				require.True(t, j.ts.aborted.Load())
				require.EqualValues(t, 1, c.specs.discarded.Load())
				return
			}
			require.True(t, sp.answers(1000, "go forward"))
			require.False(t, sp.answers(1000, "go forward ten"))
			decision := OutputMessage{Output: duplex.Output{Kind: duplex.OutDecision, Turn: c.upcoming(), Decision: duplex.DecisionListen}}
			confirmed, err := c.answer(context.Background(), []endpoint{{tr: duplex.Transcription{Text: "go forward"}, sp: sp}}, &decision, 0)
			require.NoError(t, err)
			require.Equal(t, []*speculation{sp}, confirmed)
			require.Equal(t, duplex.DecisionSpeak, decision.Decision)
			require.Equal(t, sp.ts.n, decision.Turn)
			require.Equal(t, []gpu.ChatMessage{{Role: "user", Content: "go forward", Turn: sp.ts.n}}, c.history)
			require.Equal(t, 1, sp.at)
			require.Contains(t, c.live, sp.ts)
			c.releaseSpec(sp)
			require.True(t, <-sp.verdict)
			require.True(t, sink.waitFor(5*time.Second, func(outs []OutputMessage) bool { return len(ofKind(outs, duplex.OutTranscript)) == 1 }))
		})
	}
}

// TestConversationCancel: CancelTurn aborts only its turn; CancelResponse every live one.
func TestConversationCancel(t *testing.T) {
	c, _, _ := newTestConversation(t, DuplexOptions{})
	one, err := c.startResponse(1, 0, nil)
	require.NoError(t, err)
	two, err := c.startResponse(0, 0, nil)
	require.NoError(t, err)
	require.Equal(t, []int{1, 2}, []int{one.n, two.n})
	c.cancel(true, func(ts *turnState) bool { return ts.n == 2 })
	require.False(t, one.aborted.Load())
	require.True(t, two.aborted.Load())
	require.True(t, two.keep.Load())
	c.cancel(false, func(*turnState) bool { return true })
	require.True(t, one.aborted.Load())
	require.False(t, one.keep.Load())
}

// TestToolsDeclReplace: the tools declaration takes the old one's place in the history, or
// goes after the conversation when the sequence cannot be rolled back to it.
func TestToolsDeclReplace(t *testing.T) {
	sys, user := gpu.ChatMessage{Role: "system", Content: "be brief"}, gpu.ChatMessage{Role: "user", Content: "hi"}
	decl := func(s string) gpu.ChatMessage { return gpu.ChatMessage{Role: "system", Content: s} }
	cases := []struct {
		name    string
		hist    []gpu.ChatMessage
		have    string
		want    string
		inPlace bool
		wantH   []gpu.ChatMessage
		wantAt  int
	}{
		{"a first one goes last", []gpu.ChatMessage{sys, user}, "", "A", true, []gpu.ChatMessage{sys, user, decl("A")}, 2},
		{"a change in place", []gpu.ChatMessage{sys, decl("A"), user}, "A", "B", true, []gpu.ChatMessage{sys, decl("B"), user}, 1},
		{"a change after a lost mark goes last", []gpu.ChatMessage{sys, decl("A"), user}, "A", "B", false, []gpu.ChatMessage{sys, user, decl("B")}, 2},
		{"a removal", []gpu.ChatMessage{sys, decl("A"), user}, "A", "", true, []gpu.ChatMessage{sys, user}, 1},
		{"nothing to remove", []gpu.ChatMessage{sys, user}, "", "", true, []gpu.ChatMessage{sys, user}, 2},
	}
	for _, tc := range cases {
		d := toolsDecl{have: tc.have}
		got, at := d.replace(append([]gpu.ChatMessage(nil), tc.hist...), tc.want, tc.inPlace)
		require.Equal(t, tc.wantH, got, tc.name)
		require.Equal(t, tc.wantAt, at, tc.name)
		require.Equal(t, tc.want, d.have, tc.name)
	}
}

// TestReplyFate: what stays of a reply, by its kind. A plain reply stays in the sequence and
// joins the history; a ResponseSpec's own context is rolled back unless its reply can stay as
// a plain one; a speculation is rolled back only when discarded.
func TestReplyFate(t *testing.T) {
	mark := &undoPoint{}
	plain := &reply{inSeq: true}
	ownCtx := &reply{rspec: true, inSeq: false, undo: mark}
	nothingOwn := &reply{rspec: true, inSeq: true, undo: mark}
	input := &reply{rspec: true, spec: duplex.ResponseSpec{Input: []duplex.Message{}}}
	outOfBand := &reply{rspec: true, spec: duplex.ResponseSpec{OutOfBand: true}, inSeq: true, undo: mark}
	spec := &reply{sp: &speculation{}, inSeq: true, undo: mark}
	type facts struct {
		text                       string
		calls                      int
		confirmed, generated, stay bool
	}
	ok := facts{"hi", 0, true, true, true}
	cases := []struct {
		name string
		rp   *reply
		f    facts
		want replyFate
	}{
		{"plain", plain, ok, replyFate{kept: true, joins: true}},
		{"plain, empty", plain, facts{"", 0, true, true, true}, replyFate{}},
		{"plain, aborted", plain, facts{"hi", 0, true, true, false}, replyFate{}},
		{"plain, failed", plain, facts{"", 0, true, false, true}, replyFate{}},
		{"own context", ownCtx, ok, replyFate{joins: true, undo: true}},
		{"own context, failed", ownCtx, facts{"", 0, true, false, true}, replyFate{undo: true}},
		{"nothing of its own", nothingOwn, ok, replyFate{kept: true, joins: true}},
		{"nothing of its own, calls", nothingOwn, facts{"call", 1, true, true, true}, replyFate{joins: true, undo: true}},
		{"nothing of its own, aborted", nothingOwn, facts{"hi", 0, true, true, false}, replyFate{undo: true}},
		{"its own input", input, ok, replyFate{joins: true}},
		{"out of band", outOfBand, ok, replyFate{undo: true}},
		{"speculation confirmed", spec, ok, replyFate{kept: true, joins: true}},
		{"speculation confirmed, aborted", spec, facts{"hi", 0, true, true, false}, replyFate{}},
		{"speculation confirmed, failed", spec, facts{"", 0, true, false, true}, replyFate{}},
		{"speculation discarded", spec, facts{"hi", 0, false, true, true}, replyFate{undo: true}},
	}
	for _, tc := range cases {
		got := tc.rp.fateOf(tc.f.text, tc.f.calls, tc.f.confirmed, tc.f.generated, tc.f.stay)
		require.Equal(t, tc.want, got, tc.name)
	}
}
