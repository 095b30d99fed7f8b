package session

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// The responses' decisions, table-tested without a Session: one typed input in, the plan or the
// effects out.

// route: where each engine output goes, with or without an open response, under auto-response
// or not.
func TestResponsesRoute(t *testing.T) {
	listen := duplex.Output{Kind: duplex.OutDecision, Decision: duplex.DecisionListen, Turn: 4}
	speak := duplex.Output{Kind: duplex.OutDecision, Decision: duplex.DecisionSpeak, Turn: 4}
	audio := duplex.Output{Kind: duplex.OutAudio, Turn: 4}
	tests := []struct {
		name   string
		active *response // nil: none
		o      duplex.Output
		ahead  int
		auto   bool
		want   outputPlan
	}{
		{"an append failed", nil, duplex.Output{Kind: duplex.OutError, Turn: -1}, 0, false, outputPlan{route: routeAppendFailed}},
		{"listen owed to a forwarded chunk", nil, listen, 2, false, outputPlan{route: routeAheadListen}},
		{"transcript delta", nil, duplex.Output{Kind: duplex.OutTranscriptDelta, Turn: 4}, 0, false, outputPlan{route: routeTranscriptDelta}},
		{"transcript", nil, duplex.Output{Kind: duplex.OutTranscript, Turn: 1}, 0, true, outputPlan{route: routeTranscript}},
		{"a turn that is over", nil, duplex.Output{Kind: duplex.OutAudio, Turn: 2}, 0, true, outputPlan{route: routeDrop}},
		{"listen between responses", nil, listen, 0, false, outputPlan{route: routeListen}},
		{"listen during a response", &response{turn: bound(4)}, listen, 0, false, outputPlan{route: routeDrop}},
		{"speak without a response, manual", nil, speak, 0, false, outputPlan{route: routeSpeak}},
		{"speak without a response, auto", nil, speak, 0, true, outputPlan{route: routeSpeak, begin: true}},
		{"speak of the response's turn", &response{turn: bound(4)}, speak, 0, true, outputPlan{route: routeSpeak}},
		{"speak of a newer turn hands off", &response{turn: bound(3)}, speak, 0, true, outputPlan{route: routeSpeak, handoff: true, begin: true}},
		{"listen of a newer turn does not", &response{turn: bound(3)}, listen, 0, true, outputPlan{route: routeDrop}},
		{"audio of the response", &response{turn: bound(4)}, audio, 0, false, outputPlan{route: routeResponse}},
		{"audio of an unbound response", &response{turn: requestclient.NewTurn(4)}, audio, 0, false, outputPlan{route: routeResponse}},
		{"audio of a newer turn, auto", &response{turn: bound(3)}, audio, 0, true, outputPlan{route: routeResponse, handoff: true, begin: true}},
		{"audio without a response, auto", nil, audio, 0, true, outputPlan{route: routeResponse, begin: true}},
		{"audio without a response, manual", nil, audio, 0, false, outputPlan{route: routeDrop}},
		{"finished without a response", nil, duplex.Output{Kind: duplex.OutFinished, Turn: 4}, 0, true, outputPlan{route: routeTurnClosed}},
		{"failed without a response", nil, duplex.Output{Kind: duplex.OutError, Turn: 4}, 0, true, outputPlan{route: routeTurnFailed}},
		{"usage without a response", nil, duplex.Output{Kind: duplex.OutUsage, Turn: 4}, 0, true, outputPlan{route: routeDrop}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := newResponses("duplex-test", 0)
			rs.lastClosed = 2
			rs.resp = tc.active
			require.Equal(t, tc.want, rs.route(tc.o, tc.ahead, tc.auto))
			require.Same(t, tc.active, rs.resp, "route changes nothing")
		})
	}
}

// truncate and playbackAck: the item cut, the response clipped, and the effects told.
func TestResponsesTruncateAndAck(t *testing.T) {
	newRig := func() (*responses, *conversation, *response) {
		rs := newResponses("duplex-test", 0)
		conv := &conversation{}
		r := &response{id: "resp_1", itemID: "item_a", audio: true, play: playback{sentMs: 1500, playedMs: -1, ackedMs: -1}}
		conv.insert(&item{ID: "item_a", Role: "assistant", Type: "message", Audio: true, AudioMs: 1500, Text: "hello"}, "")
		rs.resp = r
		return &rs, conv, r
	}
	t.Run("truncate the active item", func(t *testing.T) {
		rs, conv, r := newRig()
		evs := rs.truncate(conv, 3, "evt_1", "item_a", 0, 700)
		require.Equal(t, []Event{{Epoch: 3, Effect: ItemTruncated{ItemID: "item_a", AudioEndMs: 700}}}, evs)
		require.True(t, r.truncated)
		require.InDelta(t, 700, r.play.playedMs, 0.001)
	})
	t.Run("truncate an unknown item", func(t *testing.T) {
		rs, conv, r := newRig()
		evs := rs.truncate(conv, 3, "evt_1", "item_x", 0, 700)
		require.Len(t, evs, 1)
		e, ok := evs[0].Effect.(Error)
		require.True(t, ok)
		require.Equal(t, "evt_1", e.EventID)
		require.Equal(t, 3, evs[0].Epoch)
		require.False(t, r.truncated)
	})
	t.Run("ack clipped to what was sent, with truncate", func(t *testing.T) {
		rs, conv, r := newRig()
		evs := rs.playbackAck(&PlaybackAck{Base: Base{ID: "evt_2"}, PlayedMs: 9000, Truncate: true}, conv, 1)
		require.Equal(t, []Event{
			{Epoch: 1, Effect: PlaybackAcknowledged{ResponseID: "resp_1", ItemID: "item_a", PlayedMs: 1500, SentMs: 1500, CommittedMs: 1500, Truncated: true}},
			{Epoch: 1, Effect: ItemTruncated{ItemID: "item_a", AudioEndMs: 1500}},
		}, evs)
		require.InDelta(t, 1500, r.play.ackedMs, 0.001)
	})
	t.Run("ack of another response", func(t *testing.T) {
		rs, conv, r := newRig()
		evs := rs.playbackAck(&PlaybackAck{ResponseID: "resp_2", PlayedMs: 100}, conv, 1)
		require.Equal(t, "playback_item_not_found", evs[0].Effect.(Error).Code)
		require.InDelta(t, -1, r.play.ackedMs, 0.001)
	})
}

// cancelRefusal and activeRefusal: why a cancel or a new response is refused, or nil.
func TestResponsesRefusals(t *testing.T) {
	rs := newResponses("duplex-test", 0)
	require.Equal(t, "response_cancel_not_active", rs.cancelRefusal(&CancelResponse{}, 0).Effect.(Error).Code)
	require.Nil(t, rs.activeRefusal("evt", 0))
	rs.resp = &response{id: "resp_1"}
	require.Nil(t, rs.cancelRefusal(&CancelResponse{}, 0))
	require.Nil(t, rs.cancelRefusal(&CancelResponse{ResponseID: "resp_1"}, 0))
	other := rs.cancelRefusal(&CancelResponse{ResponseID: "resp_2"}, 0).Effect.(Error)
	require.Equal(t, "response_id", other.Param)
	busy := rs.activeRefusal("evt", 2)
	require.Equal(t, "conversation_already_has_active_response", busy.Effect.(Error).Code)
	require.Equal(t, 2, busy.Epoch)
}

// textOutput: tokens always count; a text response announces its part once, then deltas; an
// audio response's text rides on its audio.
func TestResponseTextOutput(t *testing.T) {
	r := &response{id: "resp_1", itemID: "item_1", epoch: 2}
	evs := r.textOutput(duplex.Output{Kind: duplex.OutText, Text: "Hi", Tokens: 1})
	require.Equal(t, []Event{
		{Epoch: 2, Model: true, Effect: ContentPart{Phase: PhaseAdded, ResponseID: "resp_1", ItemID: "item_1", Kind: PartText}},
		{Epoch: 2, Model: true, Effect: OutputDelta{Kind: PartText, ResponseID: "resp_1", ItemID: "item_1", Text: "Hi"}},
	}, evs)
	require.Len(t, r.textOutput(duplex.Output{Kind: duplex.OutText, Text: " there", Tokens: 2}), 1)
	require.Equal(t, "Hi there", r.out.text.String())
	require.Empty(t, r.textOutput(duplex.Output{Kind: duplex.OutText, Tokens: 1}))
	require.Equal(t, 4, r.out.outTokens)
	withAudio := &response{audio: true}
	require.Empty(t, withAudio.textOutput(duplex.Output{Kind: duplex.OutText, Text: "Hi", Tokens: 1}))
	require.Equal(t, 1, withAudio.out.outTokens)
}

// doneEvents: the terminal sequence of a text response in the conversation, its item status
// from the response's.
func TestResponsesDoneEvents(t *testing.T) {
	for _, status := range []string{"completed", "cancelled"} {
		t.Run(status, func(t *testing.T) {
			rs := newResponses("duplex-test", 0)
			conv := &conversation{}
			r := &response{id: "resp_1", itemID: "item_1", epoch: 1, play: playback{playedMs: -1}}
			r.out.text.WriteString("Hi")
			conv.insert(&item{ID: "item_1", Role: "assistant", Type: "message", Status: "in_progress"}, "")
			st := &settings{}
			evs := rs.doneEvents(r, st, conv, status, nil)
			kinds := make([]string, 0, len(evs))
			for _, ev := range evs {
				require.Equal(t, 1, ev.Epoch)
				require.False(t, ev.Model, "lifecycle events are not fenced")
				kinds = append(kinds, effectName(ev.Effect))
			}
			require.Equal(t, []string{"ContentPart", "OutputDone", "ContentPart", "OutputItem", "ConversationItem", "ResponseDone", "RateLimits"}, kinds)
			want := "completed"
			if status != "completed" {
				want = "incomplete"
			}
			require.Equal(t, want, conv.find("item_1").Status)
			done := evs[5].Effect.(ResponseDone).Response
			require.Equal(t, status, done.Status)
			require.Equal(t, "duplex-test", done.SessionID)
			require.Len(t, done.Output, 1)
		})
	}
}

// effectName is the Go name of an effect's type, for tables of effect sequences.
func effectName(e Effect) string {
	switch e.(type) {
	case ContentPart:
		return "ContentPart"
	case OutputDone:
		return "OutputDone"
	case OutputItem:
		return "OutputItem"
	case ConversationItem:
		return "ConversationItem"
	case ResponseDone:
		return "ResponseDone"
	case RateLimits:
		return "RateLimits"
	}
	return "other"
}

// fenceLate: the late result of a cancelled response closes its turn once; cancelSignal: what
// the engine is told for each cancel source.
func TestResponsesFenceLateAndCancelSignal(t *testing.T) {
	rs := newResponses("duplex-test", 0)
	require.False(t, rs.fenceLate(jobResult{}), "no turn: nothing to fence")
	require.True(t, rs.fenceLate(jobResult{turn: 3, haveTurn: true}))
	require.True(t, rs.over(3))
	require.False(t, rs.fenceLate(jobResult{turn: 3, haveTurn: true}), "already over")
	for source, want := range map[string]string{"barge_in": "barge_in", "turn_detected": "barge_in", "cancel": "input.cancel",
		"client_cancelled": "response.cancel", "output_audio_buffer_clear": "response.cancel"} {
		require.Equal(t, want, cancelSignal(source), source)
	}
}

// The small decisions of the other sub-states: a VAD turn's answer, a commit's refusal, an MCP
// call's continuation, a client item's audio, and item delete/retrieve.
func TestSubStateDecisions(t *testing.T) {
	td := &TurnDetection{CreateResponse: true}
	require.True(t, vadResponds(Config{TurnDetection: td}, Options{}, false))
	require.False(t, vadResponds(Config{TurnDetection: td}, Options{}, true), "a response is active")
	require.False(t, vadResponds(Config{TurnDetection: td}, Options{Transcription: true}, false), "transcription only")
	require.False(t, vadResponds(Config{}, Options{}, false), "no turn detection")

	interrupt, listen := &TurnDetection{InterruptResponse: true}, &TurnDetection{}
	for _, tc := range []struct {
		vr        vadResult
		active    bool
		td        *TurnDetection
		auto      bool
		overlapMs float64
		heard     bool
		cancel    string
	}{
		{vadResult{}, true, interrupt, false, 0, false, ""},
		{vadResult{started: true}, false, interrupt, false, 0, true, ""},
		{vadResult{started: true, voiced: true}, true, interrupt, false, 0, true, bargeSpeech},
		{vadResult{started: true}, true, listen, false, 0, true, ""},
		{vadResult{started: true}, true, nil, false, 0, true, ""},
		// The engine's turns (auto_response) without interrupt_response: a remark is heard, a
		// substantial interruption cuts the reply.
		{vadResult{started: true, voiced: true}, true, listen, true, 300, true, ""},
		{vadResult{voiced: true}, true, listen, true, OverlapBargeInMs - 1, false, ""},
		{vadResult{voiced: true}, true, listen, true, OverlapBargeInMs, false, bargeSustained},
		{vadResult{voiced: true}, true, listen, false, OverlapBargeInMs, false, ""},
		{vadResult{voiced: true}, false, listen, true, OverlapBargeInMs, false, ""},
		{vadResult{voiced: true}, true, interrupt, true, OverlapBargeInMs, false, ""},
	} {
		heard, cancel := bargeDecision(tc.vr, hearing{active: tc.active, td: tc.td, auto: tc.auto}, tc.overlapMs)
		require.Equal(t, tc.heard, heard, "%+v", tc)
		require.Equal(t, tc.cancel, cancel, "%+v", tc)
	}
	var over inputAudio
	require.Equal(t, 100.0, over.overlap(vadResult{voiced: true}, true, 100))
	require.Equal(t, 300.0, over.overlap(vadResult{voiced: true}, true, 200))
	require.Zero(t, over.overlap(vadResult{}, true, 100), "the speech stopped: a new remark starts anew")
	require.Equal(t, 100.0, over.overlap(vadResult{voiced: true}, true, 100))
	require.Zero(t, over.overlap(vadResult{voiced: true}, false, 100), "no response to overlap")

	in := &inputAudio{}
	ev := in.commitRefusal("evt_c", 2)
	require.Equal(t, "input_audio_buffer_commit_empty", ev.Effect.(Error).Code)
	require.Equal(t, 2, ev.Epoch)

	started := false
	m := &mcpResp{pending: 1, start: func() { started = true }}
	start, pace := m.afterCall(true)
	require.Nil(t, start)
	require.False(t, pace, "a call still runs")
	m.pending = 0
	start, pace = m.afterCall(false)
	require.Nil(t, start)
	require.False(t, pace, "no longer the active response")
	start, pace = m.afterCall(true)
	require.NotNil(t, start)
	require.False(t, pace)
	start()
	require.True(t, started)
	require.Nil(t, m.start, "taken")
	start, pace = m.afterCall(true)
	require.Nil(t, start)
	require.True(t, pace)

	pcm, fe := itemAudio(&CreateItem{}, AudioFormat{Type: "pcm16", Rate: EngineRate})
	require.Nil(t, pcm)
	require.Nil(t, fe)
	_, fe = itemAudio(&CreateItem{Audio: []byte{1, 2, 3}}, AudioFormat{Type: "pcm16", Rate: EngineRate})
	require.Equal(t, "bad_audio", fe.Code)
	require.Equal(t, "item.content", fe.Param)

	conv := &conversation{}
	conv.insert(&item{ID: "item_a", Role: "user", Type: "message"}, "")
	require.Equal(t, ConversationItem{Phase: PhaseRetrieved, Item: conv.find("item_a").item()},
		conv.retrieveItem(&RetrieveItem{ItemID: "item_a"}, 0).Effect)
	require.Equal(t, Event{Epoch: 1, Effect: ItemDeleted{ItemID: "item_a"}}, conv.deleteItem(&DeleteItem{ItemID: "item_a"}, 1))
	gone := conv.deleteItem(&DeleteItem{Base: Base{ID: "evt_d"}, ItemID: "item_a"}, 1).Effect.(Error)
	require.Equal(t, "item_delete_invalid_item_id", gone.Code)
	require.Equal(t, "item_retrieve_invalid_item_id", conv.retrieveItem(&RetrieveItem{ItemID: "item_a"}, 1).Effect.(Error).Code)
}

// cut: a cancelled response drops its queued audio; the client is told which sent audio to
// drop only when it holds some and notify is on.
func TestResponseCut(t *testing.T) {
	t0 := time.Unix(100, 0)
	tests := []struct {
		name   string
		r      *response
		notify bool
		want   []Event
	}{
		{"text response", &response{id: "resp_1", play: playback{playedMs: -1, frames: []frame{{}}}}, true, nil},
		{"audio, nothing sent", &response{audio: true, play: playback{playedMs: -1, frames: []frame{{}}}}, true, nil},
		{"audio sent, quiet", &response{audio: true, play: playback{playedMs: -1, sentMs: 900, started: t0}}, false, nil},
		{"audio sent, told", &response{id: "resp_1", itemID: "item_1", epoch: 2, audio: true, play: playback{playedMs: -1, sentMs: 900, started: t0}}, true,
			[]Event{{Epoch: 2, Effect: AudioBuffer{Phase: PhaseCleared, ResponseID: "resp_1", ItemID: "item_1", AudioEndMs: ptr(400)}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.r.cut(t0.Add(400*time.Millisecond), tc.notify))
			require.True(t, tc.r.cancelled.Load())
			require.Empty(t, tc.r.play.frames)
			require.Equal(t, tc.want != nil, tc.r.clearedAudio)
		})
	}
}

// startedEvents and conversation.commitAudio: the effects of a response begun and of a user
// audio item committed.
func TestStartedAndCommittedEvents(t *testing.T) {
	rs := newResponses("duplex-s1", 4096)
	conv := &conversation{}
	it, evs := conv.commitAudio("item_spoken", 1200, 50, 3)
	require.Equal(t, "item_spoken", it.ID, "the id speech_started announced")
	require.InDelta(t, 1200, it.AudioMs, 1e-9)
	require.Len(t, evs, 3)
	require.Equal(t, Event{Epoch: 3, Effect: InputCommitted{ItemID: "item_spoken"}}, evs[0])
	second, _ := conv.commitAudio("item_spoken", 100, 51, 3)
	require.NotEqual(t, "item_spoken", second.ID, "a taken id is not reused")

	for _, tc := range []struct {
		name      string
		r         *response
		wantKinds int
	}{
		{"audio, in the conversation", &response{id: "resp_1", itemID: "item_r", epoch: 3, audio: true, prevItemID: &it.ID}, 4},
		{"text, out of band", &response{id: "resp_2", itemID: "item_o", epoch: 3, outOfBand: true}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ri := &item{ID: tc.r.itemID, Role: "assistant", Type: "message", Status: "in_progress", ResponseID: tc.r.id, Audio: tc.r.audio}
			evs := rs.startedEvents(tc.r, &settings{}, ri)
			require.Len(t, evs, tc.wantKinds)
			started := evs[0].Effect.(ResponseStarted).Response
			require.Equal(t, "in_progress", started.Status)
			require.Equal(t, 4096, started.MaxOutputTokens, "inf: the server's default is told")
			require.Equal(t, tc.r.outOfBand, started.ConversationID == nil)
			added := evs[1].Effect.(OutputItem)
			require.True(t, added.Item.EmptyContent)
			for _, ev := range evs {
				require.False(t, ev.Model, "lifecycle events are not fenced")
			}
		})
	}
}
