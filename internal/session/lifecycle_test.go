package session

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// The decisions of the response lifecycle and the input path, table-tested without a Session:
// the state and one input in, the actions out (kinds shows their order by type; the fields that
// carry the decision are checked one by one).

// kinds names the actions' types in order.
func kinds(acts []action) []string {
	out := make([]string, len(acts))
	for i, a := range acts {
		out[i] = fmt.Sprintf("%T", a)
	}
	return out
}

// audioResponse is an active audio response with n queued frames of 100 ms.
func audioResponse(n int) *response {
	r := &response{id: "resp-1", itemID: "item_resp-1", epoch: 2, audio: true, turn: bound(5),
		play: playback{playedMs: -1, ackedMs: -1}, format: AudioFormat{Type: "pcm16", Rate: OutputRate}}
	for i := range n {
		r.play.frames = append(r.play.frames, frame{data: []byte{1, 2}, ms: frameMs, text: fmt.Sprint("w", i)})
	}
	return r
}

func TestResponsesPace(t *testing.T) {
	now := time.Unix(100, 0)
	tests := []struct {
		name     string
		r        func() *response // nil: no response
		leadMs   float64
		detached bool
		want     []string
		check    func(t *testing.T, acts []action)
	}{
		{name: "no response", want: []string{}},
		{name: "frames within the lead", r: func() *response { return audioResponse(2) }, leadMs: 1000,
			want: []string{"session.audioOut", "session.audioOut"}},
		{name: "the lead reached arms the timer", r: func() *response { return audioResponse(3) }, leadMs: 50,
			want:  []string{"session.audioOut", "session.armPace"},
			check: func(t *testing.T, acts []action) { require.Equal(t, armPace{wait: 50 * time.Millisecond}, acts[1]) }},
		{name: "finished and drained completes", r: func() *response { r := audioResponse(1); r.finished, r.finish = true, "length"; return r }, leadMs: 1000,
			want: []string{"session.audioOut", "session.endActive", "session.responseDone", "session.settled"},
			check: func(t *testing.T, acts []action) {
				require.Equal(t, endActive{reason: "stop", state: turnIdle}, acts[1])
				done := acts[2].(responseDone)
				require.Equal(t, "incomplete", done.status)
				require.Equal(t, &StatusDetails{Type: "incomplete", Reason: "max_output_tokens"}, done.details)
				require.True(t, acts[3].(settled).followUp)
			}},
		{name: "an MCP call holds a finished response", r: func() *response {
			r := audioResponse(1)
			r.finished, r.mcp.pending = true, 1
			return r
		}, leadMs: 1000, want: []string{"session.audioOut"}},
		{name: "detached: nothing is sent", r: func() *response { return audioResponse(2) }, leadMs: 1000, detached: true, want: []string{}},
		{name: "detached, finished and drained completes", r: func() *response { r := audioResponse(0); r.finished = true; return r },
			detached: true, want: []string{"session.endActive", "session.responseDone", "session.settled"},
			check: func(t *testing.T, acts []action) { require.Equal(t, "completed", acts[1].(responseDone).status) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := newResponses("duplex-test", 0)
			if tc.r != nil {
				rs.resp = tc.r()
			}
			acts := rs.pace(now, tc.leadMs, tc.detached)
			require.Equal(t, tc.want, kinds(acts))
			if tc.check != nil {
				tc.check(t, acts)
			}
		})
	}
}

func TestResponsesCancel(t *testing.T) {
	now := time.Unix(100, 0)
	heard := func() *response {
		r := audioResponse(0)
		r.play.sent = []sentFrame{{startMs: 0, text: "hello"}}
		r.play.sentMs, r.play.started = 100, now.Add(-time.Second)
		return r
	}
	eng := &fakeEngine{t: t}
	tests := []struct {
		name   string
		r      func() *response
		c      cancelActive
		eng    Engine
		want   []string
		signal string
	}{
		{name: "no response", c: cancelActive{source: "client_cancelled", notify: true}, want: []string{}},
		{name: "barge-in told, heard text kept", r: heard, c: cancelActive{source: "turn_detected", wire: "turn_detected", notify: true}, eng: eng,
			want:   []string{"session.dropStale", "session.emit", "session.endActive", "session.responseDone", "session.nextEpoch", "session.queueJob"},
			signal: "barge_in"},
		{name: "a close nobody hears", r: heard, c: cancelActive{source: "disconnect", wire: "disconnect"},
			want: []string{"session.dropStale", "session.emit", "session.endActive", "session.nextEpoch"}, signal: "response.cancel"},
		{name: "out of band: the text stays out", r: func() *response { r := heard(); r.outOfBand = true; return r },
			c: cancelActive{source: "client_cancelled", wire: "client_cancelled", notify: true}, eng: eng,
			want: []string{"session.dropStale", "session.emit", "session.endActive", "session.responseDone", "session.nextEpoch"}, signal: "response.cancel"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := newResponses("duplex-test", 0)
			if tc.r != nil {
				rs.resp = tc.r()
			}
			acts, ok := rs.cancel(tc.c, now, tc.eng, 7)
			require.Equal(t, tc.r != nil, ok)
			require.Equal(t, tc.want, kinds(acts))
			if !ok {
				return
			}
			require.True(t, rs.resp.cancelled.Load())
			require.Equal(t, endActive{reason: finishedReasonForCancel(tc.c.source), state: turnBargeIn}, acts[2])
			if tc.c.notify {
				require.Len(t, acts[1].(emit).evs, 1, "output_audio_buffer.cleared")
				require.Equal(t, &StatusDetails{Type: "cancelled", Reason: tc.c.wire}, acts[3].(responseDone).details)
			} else {
				require.Empty(t, acts[1].(emit).evs)
			}
			for _, a := range acts {
				if e, ok := a.(nextEpoch); ok {
					require.Equal(t, tc.signal, e.signal)
				}
				if q, ok := a.(queueJob); ok {
					require.Equal(t, []string{"session.logLine", "session.errorOut"}, kinds(q.full), "a full queue is told")
				}
			}
		})
	}
}

func TestResponsesFailAndEnded(t *testing.T) {
	rs := newResponses("duplex-test", 0)
	r := audioResponse(2)
	rs.resp, rs.pendingIn = r, 1
	acts := rs.fail(r, 3, "engine_error", "boom", nil)
	require.Equal(t, []string{"session.emit", "session.dropStale", "session.endActive", "session.responseDone", "session.nextEpoch"}, kinds(acts))
	require.Empty(t, r.play.frames, "its audio is dropped")
	require.Equal(t, 3, acts[0].(emit).evs[0].Epoch)
	require.Equal(t, endActive{reason: "error", state: turnIdle}, acts[2])
	require.Equal(t, &StatusDetails{Type: "failed", Reason: "engine_error"}, acts[3].(responseDone).details)
	require.Equal(t, nextEpoch{signal: "response.cancel"}, acts[4])

	var conv conversation
	it := &item{ID: r.itemID, Role: "assistant", Type: "message", Status: "in_progress"}
	conv.insert(it, "")
	r.play.sent, r.play.sentMs, r.play.ackedMs = []sentFrame{{text: "hi"}}, 100, 60
	acts = rs.ended(&conv, "stop", turnIdle)
	require.Nil(t, rs.resp)
	require.Equal(t, 0, rs.pendingIn, "it answered the input")
	require.Equal(t, turnIdle, rs.turnState)
	require.Equal(t, "hi", it.Text, "its item keeps what was sent")
	require.Equal(t, []string{"session.endTurn"}, kinds(acts))
	end := acts[0].(endTurn)
	require.Same(t, r, end.r)
	require.Equal(t, requestclient.TurnOutcome{Reason: "stop", DeliveredMs: 100, PlayedMs: 60}, end.outcome)
	require.Nil(t, rs.ended(&conv, "stop", turnIdle), "nothing to end")
}

func TestResponsesBegin(t *testing.T) {
	tests := []struct {
		name      string
		stageTurn int
		outOfBand bool
		wantTurn  int
		wantNext  int
		wantBound int
	}{
		{name: "the input's turn", stageTurn: -1, wantTurn: 3, wantNext: 4, wantBound: -1},
		{name: "the engine's own turn", stageTurn: 6, wantTurn: 6, wantNext: 7, wantBound: 6},
		{name: "out of band", stageTurn: -1, outOfBand: true, wantTurn: 3, wantNext: 4, wantBound: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := newResponses("duplex-test", 0)
			var conv conversation
			st := newSettings(Options{}, ManagerConfig{ModelName: "omni", TurnDetection: defaultTurnDetection()})
			r, next, acts := rs.begin(beginning{stageTurn: tc.stageTurn, input: 3, epoch: 2, id: "resp-x",
				o: respOptions{audio: true, outOfBand: tc.outOfBand}, now: 12.5}, &conv, &st)
			require.Same(t, r, rs.resp)
			require.Equal(t, turnAssistantGenerating, rs.turnState)
			require.Equal(t, 1, r.turnID)
			require.Equal(t, "item_resp-x", r.itemID)
			require.Equal(t, tc.wantTurn, r.turn.ID())
			require.Equal(t, tc.wantBound, r.turn.Engine())
			require.Equal(t, tc.wantNext, next)
			require.Equal(t, !tc.outOfBand, conv.find(r.itemID) != nil)
			require.Equal(t, []string{"session.beginTurn", "session.emit"}, kinds(acts))
			require.Equal(t, beginTurn{r: r, turn: tc.wantTurn, bind: tc.stageTurn, arrival: 12.5}, acts[0])
		})
	}
}

func TestFollowUpPlan(t *testing.T) {
	call := &item{Type: "mcp_call"}
	tests := []struct {
		name            string
		f               followUp
		active, closing bool
		want            []string
	}{
		{"after results", followUp{depth: 1}, false, false, []string{"session.openEngine"}},
		{"a response runs", followUp{depth: 1}, true, false, []string{}},
		{"closing", followUp{depth: 1}, false, true, []string{}},
		{"an approved call runs anyway", followUp{depth: 1, call: call}, true, false, []string{"session.beginFollowUp"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, kinds(followUpPlan(tc.f, tc.active, tc.closing)))
		})
	}
}

func TestBarge(t *testing.T) {
	interrupt := &TurnDetection{InterruptResponse: true}
	tests := []struct {
		name   string
		vr     vadResult
		active bool
		td     *TurnDetection
		onset  float64
		want   []string
	}{
		{"no speech", vadResult{}, true, interrupt, 10, []string{}},
		{"speech, nothing to interrupt", vadResult{started: true}, false, interrupt, 10, []string{"session.stopIdle"}},
		{"speech, interrupt_response false", vadResult{started: true}, true, &TurnDetection{}, 10, []string{"session.stopIdle"}},
		{"barge-in, timed", vadResult{started: true}, true, interrupt, 10,
			[]string{"session.stopIdle", "session.emit", "session.cancelActive", "session.bargedIn"}},
		{"barge-in, onset unknown", vadResult{started: true}, true, interrupt, 0,
			[]string{"session.stopIdle", "session.emit", "session.cancelActive"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			acts := barge(tc.vr, hearing{td: tc.td, active: tc.active, epoch: 4, sessionID: "s", wall: 25}, tc.onset, 0)
			require.Equal(t, tc.want, kinds(acts))
			if len(acts) > 2 {
				require.Equal(t, cancelActive{source: "turn_detected", wire: "turn_detected", notify: true}, acts[2])
			}
			if len(acts) > 3 {
				require.Equal(t, bargedIn{latency: 15}, acts[3])
			}
		})
	}
}

// An engine that owns the turns yields to a substantial interruption: the reply is cancelled
// as a barge-in (vllm-omni's reason), untimed (the onset was OverlapBargeInMs earlier).
func TestBargeSustained(t *testing.T) {
	h := hearing{td: &TurnDetection{}, auto: true, active: true, epoch: 4, sessionID: "s", wall: 25}
	acts := barge(vadResult{voiced: true}, h, 10, OverlapBargeInMs)
	require.Equal(t, []string{"session.emit", "session.cancelActive"}, kinds(acts))
	require.Equal(t, OverlapDecision{SessionID: "s", Epoch: 4, Policy: policyListenOnly, Action: "barge_in", Reason: bargeSustained},
		acts[0].(emit).evs[0].Effect)
	require.Equal(t, cancelActive{source: "turn_detected", wire: "barge_in", notify: true}, acts[1])
	require.Empty(t, barge(vadResult{voiced: true}, h, 10, OverlapBargeInMs-100), "a remark is heard, not a barge-in")
}

func TestInputKeep(t *testing.T) {
	pcm := make([]float32, 160) // 10 ms, 640 bytes
	var in inputAudio
	acts, ok := in.keep(keepAudio{eventID: "e1", pcm: pcm}, 1000, 5, 2, false)
	require.True(t, ok)
	require.Equal(t, []string{"session.openAhead", "session.forwardAhead", "session.pauseEnd"}, kinds(acts), "the first chunk opens ahead")
	require.Equal(t, forwardAhead{in: &in, turn: 2, wall: 5}, acts[1])

	acts, ok = in.keep(keepAudio{eventID: "e2", pcm: pcm}, 1000, 6, 2, true)
	require.False(t, ok)
	require.Equal(t, []action{errorOut{code: "input_backpressure", msg: "more than 1000 bytes of input are pending", eventID: "e2", param: "audio"}}, acts)

	acts, ok = in.keep(keepAudio{eventID: "e3", pcm: pcm[:10], stopped: true}, 1000, 7, 2, true)
	require.True(t, ok)
	require.Equal(t, []action{forwardAhead{in: &in, turn: 2, busy: true, wall: 7}, turnEnd{stopped: true}}, acts, "the VAD ended the turn")
}

func TestInputAppendWithoutTurnDetection(t *testing.T) {
	var in inputAudio
	data := make([]byte, 320) // 10 ms of pcm16 at the engine's rate
	acts := in.append(&AppendAudio{Base: Base{ID: "e1"}, Data: data}, hearing{format: AudioFormat{Type: "pcm16", Rate: EngineRate}})
	require.Equal(t, []string{"session.keepAudio"}, kinds(acts), "no VAD: kept for the commit")
	require.Len(t, acts[0].(keepAudio).pcm, 160)
	require.Empty(t, in.append(&AppendAudio{Base: Base{ID: "e2"}}, hearing{format: AudioFormat{Type: "pcm16", Rate: EngineRate}}), "nothing to hear")
	bad := AudioFormat{Type: "flac"}
	acts = in.append(&AppendAudio{Base: Base{ID: "e3"}, Data: data, Format: &bad}, hearing{format: AudioFormat{Type: "pcm16", Rate: EngineRate}})
	require.Equal(t, []string{"session.errorOut"}, kinds(acts))
	require.Equal(t, "unsupported_audio_format", acts[0].(errorOut).code)
}

func TestIdleStepPlan(t *testing.T) {
	o := respOptions{audio: true}
	ev := Event{Epoch: 1}
	require.Empty(t, idleStep{}.plan(o))
	require.Equal(t, []action{emit{evs: []Event{ev}}, commitInput{respond: true}}, idleStep{fire: true, event: ev, commit: true}.plan(o))
	require.Equal(t, []action{emit{evs: []Event{ev}}, replyOver{o: o}}, idleStep{fire: true, event: ev}.plan(o))
}

func TestEngineLinkStale(t *testing.T) {
	opened := openOptions(&settings{cfg: Config{Instructions: "a"}}, 0)
	changed := opened
	changed.Instructions = "b"
	eng := &fakeEngine{t: t}
	tests := []struct {
		name  string
		link  engineLink
		opts  duplex.Options
		busy  bool
		stale bool
	}{
		{"no stream", engineLink{fresh: true, opts: opened}, changed, false, false},
		{"not fresh", engineLink{engine: eng, opts: opened}, changed, false, false},
		{"busy", engineLink{engine: eng, fresh: true, opts: opened}, changed, true, false},
		{"same settings", engineLink{engine: eng, fresh: true, opts: opened}, opened, false, false},
		{"new settings", engineLink{engine: eng, fresh: true, opts: opened}, changed, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.stale, tc.link.stale(tc.opts, tc.busy))
		})
	}
}
