package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// Tests for session paths that had none (issue 14 item 7): item create/retrieve/delete,
// truncate, playback.ack, the epoch fence on late engine output, a slow client's close and the
// cancellation of a turn whose number arrived after its response was cancelled.

// startAudioResponse opens a session with a minute of output lead (all of the fake engine's
// 200 ms of audio is sent at once and the response stays active: the fake never finishes) and
// starts one response. It returns the response id after its two audio deltas went out.
func startAudioResponse(t *testing.T, eng *fakeEngine) (*Session, *sink, func() string, string) {
	t.Helper()
	s, sk, _, wait := startSession(t, eng, time.Minute)
	ctx := context.Background()
	require.NoError(t, s.Submit(ctx, &AppendAudio{Data: make([]byte, 3200)}))
	require.NoError(t, s.Submit(ctx, &CommitInput{ResponseCreate: ptr(true)}))
	id := sk.until(t, "response.created").wire()["response"].(map[string]any)["id"].(string)
	sk.until(t, "response.output_audio.delta")
	sk.until(t, "response.output_audio.delta")
	return s, sk, wait, id
}

// closeSession ends s with session.close and checks it closed for that reason.
func closeSession(t *testing.T, s *Session, sk *sink, wait func() string) {
	t.Helper()
	require.NoError(t, s.Submit(context.Background(), &CloseSession{}))
	require.Equal(t, ReasonClientClose, wait())
	sk.until(t, "session.closed")
}

// errorCode waits for the next error event and returns its code and param.
func errorCode(t *testing.T, sk *sink) (code, param string) {
	t.Helper()
	e := sk.until(t, "error").wire()["error"].(map[string]any)
	p, _ := e["param"].(string)
	return e["code"].(string), p
}

func itemOf(ev Event) map[string]any { return ev.wire()["item"].(map[string]any) }

func TestItemCreateRetrieveDelete(t *testing.T) {
	eng := &fakeEngine{t: t}
	s, sk, _, wait := startSession(t, eng, time.Minute)
	ctx := context.Background()
	submit := func(c Command) { require.NoError(t, s.Submit(ctx, c)) }

	submit(&CreateItem{ItemID: "item_b", Role: "assistant", Text: "second"})
	added := sk.until(t, "conversation.item.added")
	require.Equal(t, "item_b", itemOf(added)["id"])
	require.Nil(t, added.wire()["previous_item_id"])
	require.Equal(t, "item_b", itemOf(sk.until(t, "conversation.item.done"))["id"])

	// previous_item_id "root" puts the item first: its previous id is nil, and item_b's is now it.
	submit(&CreateItem{ItemID: "item_a", Role: "assistant", Text: "first", PreviousItemID: "root"})
	added = sk.until(t, "conversation.item.added")
	require.Nil(t, added.wire()["previous_item_id"])
	submit(&RetrieveItem{ItemID: "item_b"})
	got := itemOf(sk.until(t, "conversation.item.retrieved"))
	require.Equal(t, "item_b", got["id"])
	require.Equal(t, []any{map[string]any{"type": "output_text", "text": "second"}}, got["content"])

	submit(&CreateItem{ItemID: "item_a", Role: "assistant", Text: "again"})
	code, param := errorCode(t, sk)
	require.Equal(t, "item_exists", code)
	require.Equal(t, "item.id", param)

	submit(&DeleteItem{ItemID: "item_a"})
	require.Equal(t, "item_a", sk.until(t, "conversation.item.deleted").wire()["item_id"])
	submit(&RetrieveItem{ItemID: "item_a"})
	code, param = errorCode(t, sk)
	require.Equal(t, "item_retrieve_invalid_item_id", code)
	require.Equal(t, "item_id", param)
	submit(&DeleteItem{ItemID: "item_a"})
	code, _ = errorCode(t, sk)
	require.Equal(t, "item_delete_invalid_item_id", code, "an item is deleted once")

	closeSession(t, s, sk, wait)
	// Both items reached the engine in wire order (its context is append-only: a delete removes
	// the item from the conversation list, not from what the model has read).
	require.Equal(t, []string{"text:second", "text:first", "close:close"}, eng.list())
}

// Truncating the active response's audio item cuts what the session keeps: the transcript is
// gone from the item, and the assistant text put back into the engine after the cancel is only
// what was played before the cut.
func TestTruncateActiveAudioItem(t *testing.T) {
	eng := &fakeEngine{t: t}
	s, sk, wait, id := startAudioResponse(t, eng)
	ctx := context.Background()
	itemID := "item_" + id
	submit := func(c Command) { require.NoError(t, s.Submit(ctx, c)) }

	submit(&TruncateItem{ItemID: itemID, AudioEndMs: 200 + truncateSlackMs + 1})
	code, param := errorCode(t, sk)
	require.Equal(t, "invalid_value", code, "past the audio sent (200 ms) and the slack")
	require.Equal(t, "audio_end_ms", param)
	submit(&TruncateItem{ItemID: itemID, ContentIndex: 1, AudioEndMs: 50})
	code, param = errorCode(t, sk)
	require.Equal(t, "invalid_value", code)
	require.Equal(t, "content_index", param)

	submit(&TruncateItem{ItemID: itemID, AudioEndMs: 50})
	tr := sk.until(t, "conversation.item.truncated")
	require.Equal(t, ItemTruncated{ItemID: itemID, AudioEndMs: 50}, tr.Effect)

	submit(&CancelResponse{})
	cleared := sk.until(t, "output_audio_buffer.cleared")
	require.Equal(t, 50, *effectOf[AudioBuffer](t, cleared).AudioEndMs, "the client holds audio past the cut")
	sk.until(t, "response.done")
	submit(&RetrieveItem{ItemID: itemID})
	got := itemOf(sk.until(t, "conversation.item.retrieved"))
	require.Equal(t, []any{map[string]any{"type": "output_audio", "transcript": ""}}, got["content"])
	require.Equal(t, "incomplete", got["status"])

	// A finished item: its transcript (what was heard, here the acknowledged 200 ms) goes with
	// the cut, and a cut past its audio is refused.
	require.NoError(t, s.Submit(ctx, &AppendAudio{Data: make([]byte, 3200)}))
	submit(&CommitInput{ResponseCreate: ptr(true)})
	second := "item_" + sk.until(t, "response.created").wire()["response"].(map[string]any)["id"].(string)
	sk.until(t, "response.output_audio.delta")
	sk.until(t, "response.output_audio.delta")
	submit(&PlaybackAck{PlayedMs: 200})
	sk.until(t, "playback.acknowledged")
	submit(&BargeIn{})
	sk.until(t, "response.done")
	submit(&RetrieveItem{ItemID: second})
	got = itemOf(sk.until(t, "conversation.item.retrieved"))
	require.Equal(t, []any{map[string]any{"type": "output_audio", "transcript": "one two "}}, got["content"])
	submit(&TruncateItem{ItemID: second, AudioEndMs: 200 + truncateSlackMs + 1})
	code, _ = errorCode(t, sk)
	require.Equal(t, "invalid_value", code)
	submit(&TruncateItem{ItemID: second, AudioEndMs: 100})
	require.Equal(t, 100, effectOf[ItemTruncated](t, sk.until(t, "conversation.item.truncated")).AudioEndMs)
	submit(&RetrieveItem{ItemID: second})
	got = itemOf(sk.until(t, "conversation.item.retrieved"))
	require.Equal(t, []any{map[string]any{"type": "output_audio", "transcript": ""}}, got["content"])

	// A text item has no model audio to truncate.
	submit(&CreateItem{ItemID: "item_u", Role: "assistant", Text: "typed"})
	sk.until(t, "conversation.item.done")
	submit(&TruncateItem{ItemID: "item_u", AudioEndMs: 0})
	code, _ = errorCode(t, sk)
	require.Equal(t, "invalid_value", code)

	closeSession(t, s, sk, wait)
	// What went back into the engine as heard: of the first response only its first frame ("one "
	// starts at 0 ms, "two " at 100 ms, after the 50 ms cut); of the second, both (acknowledged).
	var texts []string
	for _, c := range eng.list() {
		if strings.HasPrefix(c, "text:") {
			texts = append(texts, c)
		}
	}
	require.Equal(t, []string{"text:one ", "text:one two ", "text:typed"}, texts)
}

// playback.ack moves the session's idea of what the user heard: it is capped at the audio sent,
// it can truncate, and the barge-in after it keeps exactly the acknowledged part.
func TestPlaybackAck(t *testing.T) {
	eng := &fakeEngine{t: t}
	s, sk, wait, id := startAudioResponse(t, eng)
	ctx := context.Background()
	submit := func(c Command) { require.NoError(t, s.Submit(ctx, c)) }

	submit(&PlaybackAck{PlayedMs: 10, ResponseID: "resp_other"})
	code, param := errorCode(t, sk)
	require.Equal(t, "playback_item_not_found", code)
	require.Equal(t, "response_id", param)

	submit(&PlaybackAck{PlayedMs: 10_000, ResponseID: id})
	ack := sk.until(t, "playback.acknowledged")
	require.Equal(t, PlaybackAcknowledged{ResponseID: id, ItemID: "item_" + id, PlayedMs: 200, SentMs: 200, CommittedMs: 200},
		ack.Effect, "played capped at the audio sent")

	submit(&PlaybackAck{PlayedMs: 120, ItemID: "item_" + id, Truncate: true})
	require.Equal(t, 120, effectOf[PlaybackAcknowledged](t, sk.until(t, "playback.acknowledged")).PlayedMs)
	require.Equal(t, 120, effectOf[ItemTruncated](t, sk.until(t, "conversation.item.truncated")).AudioEndMs)

	submit(&BargeIn{})
	require.Equal(t, 120, *effectOf[AudioBuffer](t, sk.until(t, "output_audio_buffer.cleared")).AudioEndMs)
	sk.until(t, "response.done")
	submit(&PlaybackAck{PlayedMs: 10})
	ack = sk.until(t, "playback.acknowledged")
	require.Equal(t, id, effectOf[PlaybackAcknowledged](t, ack).ResponseID, "an ack after response.done names the response that ended")
	submit(&PlaybackAck{PlayedMs: 10, ResponseID: "resp_other"})
	code, _ = errorCode(t, sk)
	require.Equal(t, "playback_item_not_found", code, "no response of that id, active or ended")

	closeSession(t, s, sk, wait)
	// Both frames started before 120 ms: the user heard both words.
	require.Contains(t, eng.list(), "text:one two ")
	// The turn statistics get the last acknowledged playback, before the turn is finalized.
	calls := eng.list()
	played := slices.Index(calls, "played:120")
	require.GreaterOrEqual(t, played, 0, "%v", calls)
	require.Less(t, played, slices.Index(calls, "finalize:barge_in"), "%v", calls)
	n := 0
	for _, c := range calls {
		if strings.HasPrefix(c, "played:") {
			n++
		}
	}
	require.Equal(t, 1, n, "one report, for the acked turn: %v", calls)
}

// lateEngine delivers one more output of the previous turn at the start of each Respond after
// the first: late output of a cancelled turn that reaches the session while its next response
// does not know its own turn number yet.
type lateEngine struct {
	*fakeEngine
	responds int
}

func (l *lateEngine) Respond(ctx context.Context, t requestclient.Turn, spec duplex.ResponseSpec) (int, error) {
	l.mu.Lock()
	l.responds++
	n := l.responds
	l.mu.Unlock()
	if n > 1 {
		l.out(duplex.Output{Kind: duplex.OutAudio, Turn: n - 1, Audio: make([]float32, 2400), Text: "late "})
	}
	return l.fakeEngine.Respond(ctx, t, spec)
}

// The epoch fence: output the engine delivers for a turn after its response was cancelled never
// reaches the client (neither alone nor while the next response waits for its turn number), the
// sink is told to drop queued output of the old epoch, and the next response runs in the new
// epoch with its own output.
func TestEpochFenceDropsLateOutput(t *testing.T) {
	fake := &fakeEngine{t: t}
	eng := &lateEngine{fakeEngine: fake}
	m := NewManager(ManagerConfig{MaxSessions: 1, MaxOutputLead: time.Minute}, &engineBackend{eng: eng, fake: fake}, zap.NewNop())
	sk := &sink{ch: make(chan Event, 1024)}
	s, wait := runSession(t, m, Options{Duplex: true}, sk, manual16k)
	ctx := context.Background()
	require.NoError(t, s.Submit(ctx, &AppendAudio{Data: make([]byte, 3200)}))
	require.NoError(t, s.Submit(ctx, &CommitInput{ResponseCreate: ptr(true)}))
	first := sk.until(t, "response.created").wire()["response"].(map[string]any)["id"].(string)
	sk.until(t, "response.output_audio.delta")
	require.NoError(t, s.Submit(ctx, &CancelResponse{}))
	done := sk.until(t, "response.done")
	require.Equal(t, 0, done.Epoch)
	sk.mu.Lock()
	require.Equal(t, 1, sk.min, "queued model output of epoch 0 is dropped")
	sk.mu.Unlock()

	// Turn 1's late output, then a barrier: nothing of it may be sent.
	fake.out(duplex.Output{Kind: duplex.OutAudio, Turn: 1, Audio: make([]float32, 2400), Text: "late "})
	fake.out(duplex.Output{Kind: duplex.OutText, Turn: 1, Text: "late "})
	fake.out(duplex.Output{Kind: duplex.OutFinished, Turn: 1})
	require.NoError(t, s.Submit(ctx, &Heartbeat{}))
	for {
		ev := <-sk.ch
		if ev.typ() == "session.heartbeat_ack" {
			break
		}
		require.NotContains(t, ev.typ(), "response.output", "late output of a cancelled turn: %v", ev.wire())
	}

	// The next response: epoch 1, stage turn 2, its deltas go out.
	require.NoError(t, s.Submit(ctx, &AppendAudio{Data: make([]byte, 3200)}))
	require.NoError(t, s.Submit(ctx, &CommitInput{ResponseCreate: ptr(true)}))
	created := sk.until(t, "response.created")
	second := created.wire()["response"].(map[string]any)["id"].(string)
	require.NotEqual(t, first, second)
	require.Equal(t, 1, created.Epoch)
	// Its engine turn first delivers turn 1's last word: only turn 2's words are the response's.
	var words []string
	for len(words) < 2 {
		ev := sk.until(t, "response.output_audio_transcript.delta")
		require.Equal(t, 1, ev.Epoch)
		d := effectOf[OutputDelta](t, ev)
		require.Equal(t, second, d.ResponseID)
		words = append(words, d.Text)
	}
	require.Equal(t, []string{"one ", "two "}, words)
	closeSession(t, s, sk, wait)
}

// failingSink refuses every event from the first of type failOn on, as the connection's
// bounded queue does once a client stops reading.
type failingSink struct {
	*sink
	failOn string
	failed bool
	after  []string // events offered after the failure
}

func (f *failingSink) Send(ev Event) error {
	f.mu.Lock()
	if ev.typ() == f.failOn {
		f.failed = true
	}
	if f.failed {
		f.after = append(f.after, ev.typ())
		f.mu.Unlock()
		return errors.New("outbound queue full")
	}
	f.mu.Unlock()
	return f.sink.Send(ev)
}

// A client whose queue overflows mid-response is closed as slow_client: the session stops
// sending at the first refused event (no session.closed: nobody can read it), ends the turn as
// a disconnect would, closes the engine and returns its slot.
func TestSlowClientEndsSession(t *testing.T) {
	eng := &fakeEngine{t: t}
	m := NewManager(ManagerConfig{MaxSessions: 1, MaxOutputLead: time.Minute}, &fakeBackend{eng}, zap.NewNop())
	sk := &failingSink{sink: &sink{ch: make(chan Event, 1024)}, failOn: "response.output_audio.delta"}
	s, wait := runSession(t, m, Options{Duplex: true}, sk, manual16k)
	done := make(chan string, 1)
	go func() { done <- wait() }()
	ctx := context.Background()
	require.NoError(t, s.Submit(ctx, &AppendAudio{Data: make([]byte, 3200)}))
	require.NoError(t, s.Submit(ctx, &CommitInput{ResponseCreate: ptr(true)}))
	select {
	case reason := <-done:
		require.Equal(t, ReasonSlowClient, reason)
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end after its sink refused an event")
	}
	require.Equal(t, 0, m.Active())
	sk.mu.Lock()
	require.Equal(t, []string{"response.output_audio.delta"}, sk.after, "nothing is offered after the first refusal")
	sk.mu.Unlock()
	want := metrics.FinishedReasonForCancel(metrics.CancelDisconnect)
	calls := eng.list()
	require.Contains(t, calls, "finalize:"+want)
	require.Equal(t, "close:"+want, calls[len(calls)-1])
}

// cancellingEngine holds Respond until released, and records CancelTurn.
type cancellingEngine struct {
	*fakeEngine
	responding chan struct{} // closed when Respond was entered
	release    chan struct{}
}

func (c *cancellingEngine) Respond(context.Context, requestclient.Turn, duplex.ResponseSpec) (int, error) {
	close(c.responding)
	<-c.release
	c.rec("respond")
	return 7, nil // the engine's turn number, learnt only now
}

func (c *cancellingEngine) CancelTurn(turn int) { c.rec(fmt.Sprintf("cancel_turn:%d", turn)) }

type engineBackend struct {
	eng  Engine
	fake *fakeEngine
}

func (b *engineBackend) SupportsDuplex() bool { return true }
func (b *engineBackend) Open(_ context.Context, _ requestclient.Fence, _ duplex.Options, out func(duplex.Output)) (Engine, error) {
	b.fake.out = out
	return b.eng, nil
}

// A response cancelled while the engine was starting it: once Respond returns its turn number,
// the session stops that turn only (CancelTurn), with no client-visible event and no second
// epoch signal, and output of that turn is dropped.
func TestCancelTurnAfterLateRespond(t *testing.T) {
	fake := &fakeEngine{t: t}
	eng := &cancellingEngine{fakeEngine: fake, responding: make(chan struct{}), release: make(chan struct{})}
	m := NewManager(ManagerConfig{MaxSessions: 1, MaxOutputLead: time.Minute}, &engineBackend{eng: eng, fake: fake}, zap.NewNop())
	sk := &sink{ch: make(chan Event, 1024)}
	s, wait := runSession(t, m, Options{Duplex: true}, sk, manual16k)
	ctx := context.Background()
	require.NoError(t, s.Submit(ctx, &AppendAudio{Data: make([]byte, 3200)}))
	require.NoError(t, s.Submit(ctx, &CommitInput{ResponseCreate: ptr(true)}))
	sk.until(t, "response.created")
	<-eng.responding
	require.NoError(t, s.Submit(ctx, &CancelResponse{}))
	sk.until(t, "response.done")
	close(eng.release)
	// The job's result comes back on its own: wait for the engine call it causes.
	require.Eventually(t, func() bool { return indexOf(eng.list(), "cancel_turn:7") >= 0 }, 5*time.Second, time.Millisecond)
	fake.out(duplex.Output{Kind: duplex.OutAudio, Turn: 7, Audio: make([]float32, 2400), Text: "late "})
	require.NoError(t, s.Submit(ctx, &Heartbeat{}))
	for {
		ev := <-sk.ch
		if ev.typ() == "session.heartbeat_ack" {
			break
		}
		require.NotContains(t, ev.typ(), "response.", "the cancelled turn stays silent: %v", ev.wire())
	}
	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	require.Equal(t, ReasonClientClose, wait())
	calls := eng.list()
	signals := 0
	for _, c := range calls {
		if strings.HasPrefix(c, "signal:") {
			signals++
		}
	}
	require.Equal(t, 1, signals, "only the cancel's own epoch signal: %v", calls)
	require.Less(t, indexOf(calls, "respond"), indexOf(calls, "cancel_turn:7"))
}
