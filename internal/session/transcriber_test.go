package session

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
)

// txConfig is a configuration for the transcriber, as settings would answer.
type txConfig struct{ transcripts, logprobs, vad bool }

func (c txConfig) sendsTranscripts() bool   { return c.transcripts }
func (c txConfig) wantsLogprobs() bool      { return c.logprobs }
func (c txConfig) vadCommits() bool         { return c.vad }
func (c txConfig) inputTranscription() bool { return c.transcripts }

// txRig is a transcriber on its own: what it sends, queues and records is kept.
type txRig struct {
	tx     *transcriber
	conv   *conversation
	events []Effect
	jobs   []job
	rec    *itemMetrics
	now    float64
	full   bool // the job queue refuses
}

func newTxRig(session bool, cfg txConfig) *txRig {
	r := &txRig{conv: &conversation{}, rec: &itemMetrics{}, now: 100}
	r.tx = &transcriber{transcriptionSession: session, sessionID: "sess_1",
		send: func(e Effect) { r.events = append(r.events, e) },
		submit: func(j job) bool {
			if r.full {
				return false
			}
			r.jobs = append(r.jobs, j)
			return true
		},
		settings: cfg, items: r.conv, wall: func() float64 { return r.now }, log: zap.NewNop(), metrics: r.rec}
	return r
}

// deltas is the transcription deltas sent, as "item:delta".
func (r *txRig) deltas() []string {
	var out []string
	for _, e := range r.events {
		if d, ok := e.(Transcription); ok && d.Phase == PhaseDelta {
			out = append(out, d.ItemID+":"+d.Text)
		}
	}
	return out
}

// TestTranscriberRefuse checks that only a transcription session refuses conversation events,
// with an invalid_value error naming the event and param "type".
func TestTranscriberRefuse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		session bool
	}{{"transcription session refuses", true}, {"conversation accepts", false}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTxRig(tc.session, txConfig{})
			require.Equal(t, tc.session, r.tx.refuse("evt_1", "response.create"))
			if !tc.session {
				require.Empty(t, r.events)
				return
			}
			require.Len(t, r.events, 1)
			e, ok := r.events[0].(Error)
			require.True(t, ok, "%T", r.events[0])
			require.Equal(t, "invalid_value", e.Code)
			require.Equal(t, "invalid_request_error", e.Type)
			require.Equal(t, "evt_1", e.EventID)
			require.Equal(t, "type", e.Param)
			require.Contains(t, e.Message, "response.create")
		})
	}
}

// TestTranscriberDeltas checks where live deltas go: the open utterance (whose item id is
// reserved in the open id), the committed item ahead of them, nowhere for discarded audio or
// while the client gets no transcripts; and the final transcript's rest as the last delta.
func TestTranscriberDeltas(t *testing.T) {
	cases := []struct {
		name string
		cfg  txConfig
		run  func(r *txRig, open *string)
		want []string
	}{
		{name: "open utterance takes the announced id", cfg: txConfig{transcripts: true}, run: func(r *txRig, open *string) {
			*open = "item_a"
			r.tx.delta("hel", open)
			r.tx.delta("lo", open)
		}, want: []string{"item_a:hel", "item_a:lo"}},
		{name: "no transcripts: nothing sent", cfg: txConfig{}, run: func(r *txRig, open *string) {
			*open = "item_a"
			r.tx.delta("hello", open)
		}},
		{name: "committed item ahead takes them", cfg: txConfig{transcripts: true}, run: func(r *txRig, open *string) {
			r.tx.endUtterance("item_c", true)
			*open = "item_next"
			r.tx.delta("late", open)
		}, want: []string{"item_c:late"}},
		{name: "discarded audio ahead drops them", cfg: txConfig{transcripts: true}, run: func(r *txRig, open *string) {
			r.tx.endUtterance("", true)
			r.tx.delta("gone", open)
			r.tx.reached("", false)
			*open = "item_b"
			r.tx.delta("kept", open)
		}, want: []string{"item_b:kept"}},
		{name: "untracked stream keeps no utterance end", cfg: txConfig{transcripts: true}, run: func(r *txRig, open *string) {
			r.tx.endUtterance("item_c", false)
			*open = "item_b"
			r.tx.delta("mine", open)
		}, want: []string{"item_b:mine"}},
		{name: "final sends its rest", cfg: txConfig{transcripts: true}, run: func(r *txRig, open *string) {
			*open = "item_a"
			r.tx.delta("good", open)
			r.tx.finishDeltas("item_a", "good morning")
		}, want: []string{"item_a:good", "item_a: morning"}},
		{name: "final without transcripts sends nothing", cfg: txConfig{}, run: func(r *txRig, _ *string) {
			r.tx.finishDeltas("item_a", "good morning")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newTxRig(false, tc.cfg)
			open := ""
			tc.run(r, &open)
			require.Equal(t, tc.want, r.deltas())
		})
	}

	t.Run("an id the conversation took is not reused", func(t *testing.T) {
		r := newTxRig(false, txConfig{transcripts: true})
		r.conv.insert(&item{ID: "item_a", Role: "user", Type: "message"}, "")
		open := "item_a"
		r.tx.delta("hi", &open)
		require.NotEqual(t, "item_a", open)
		require.Equal(t, []string{open + ":hi"}, r.deltas())
	})
}

// TestTranscriberRecords checks a transcription session's item records: completed, failed
// (with its event) and cancelled (by a clear, or by the close: committed and spoken items,
// each once), with their delta timing and the VAD's speech end; a conversation records none.
func TestTranscriberRecords(t *testing.T) {
	committed := func(r *txRig, id string, atS float64) {
		r.conv.insert(&item{ID: id, Role: "user", Type: "message", Audio: true, AudioMs: 800, CommittedAt: atS, Transcript: "hi"}, "")
		if r.tx.transcriptionSession {
			r.tx.opened(id) // as transcriber.committed does
		}
		r.tx.endUtterance(id, false)
	}
	cases := []struct {
		name    string
		session bool
		vad     bool
		run     func(r *txRig)
		want    []metrics.TranscriptionItem
		failed  string // the item a transcription.failed event names
	}{
		{name: "completed with its deltas", session: true, vad: true, run: func(r *txRig) {
			open := "item_a"
			r.tx.delta("h", &open)
			r.now = 101
			r.tx.delta("i", &open)
			committed(r, "item_a", 101.5)
			r.now = 102
			r.tx.record("item_a", r.conv.find("item_a"), metrics.ItemCompleted, "", 3*time.Millisecond)
		}, want: []metrics.TranscriptionItem{{ItemID: "item_a", SessionID: "sess_1", Committed: 101.5, SpeechEnd: 101.5, Done: 102,
			FirstDelta: 100, Deltas: 2, Outcome: metrics.ItemCompleted, AudioMs: 800, Transcript: "hi", RecognizerMs: 3}}},
		{name: "failed: event and record without transcript", session: true, run: func(r *txRig) {
			committed(r, "item_a", 100)
			r.now = 100.25
			r.tx.failed("item_a", "engine_error", "engine: boom")
		}, failed: "item_a", want: []metrics.TranscriptionItem{{ItemID: "item_a", SessionID: "sess_1", Committed: 100, Done: 100.25,
			Outcome: metrics.ItemFailed, Error: "engine_error", AudioMs: 800}}},
		{name: "cleared utterance is cancelled, never committed", session: true, run: func(r *txRig) {
			open := "item_s"
			r.tx.delta("go", &open)
			r.tx.dropOpen(&open, false)
			require.Empty(t, open, "the next utterance gets a new id")
			r.tx.dropOpen(&open, false)
		}, want: []metrics.TranscriptionItem{{ItemID: "item_s", SessionID: "sess_1", Done: 100, FirstDelta: 100, Deltas: 1,
			Outcome: metrics.ItemCancelled, Reason: reasonCleared}}},
		{name: "close cancels committed and spoken items once", session: true, run: func(r *txRig) {
			committed(r, "item_a", 99)
			open := "item_s"
			r.tx.cancelOpen(ReasonDisconnect, &open)
			require.Empty(t, open)
			r.tx.cancelOpen(ReasonDisconnect, &open)
		}, want: []metrics.TranscriptionItem{
			{ItemID: "item_a", SessionID: "sess_1", Committed: 99, Done: 100, Outcome: metrics.ItemCancelled, Reason: ReasonDisconnect, AudioMs: 800},
			{ItemID: "item_s", SessionID: "sess_1", Done: 100, Outcome: metrics.ItemCancelled, Reason: ReasonDisconnect}}},
		{name: "a conversation records nothing", run: func(r *txRig) {
			committed(r, "item_a", 99)
			open := "item_s"
			r.tx.failed("item_a", "engine_error", "engine: boom")
			r.tx.dropOpen(&open, true)
			r.tx.cancelOpen(ReasonDisconnect, &open)
		}, failed: "item_a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newTxRig(tc.session, txConfig{transcripts: true, vad: tc.vad})
			tc.run(r)
			require.Equal(t, tc.want, r.rec.items)
			var failed []string
			for _, e := range r.events {
				if f, ok := e.(Transcription); ok && f.Phase == PhaseFailed {
					failed = append(failed, f.ItemID)
					require.Equal(t, "transcription_error", f.Error.Type)
				}
			}
			if tc.failed == "" {
				require.Empty(t, failed)
			} else {
				require.Equal(t, []string{tc.failed}, failed)
			}
			require.Empty(t, r.tx.open, "no item left open")
			require.Empty(t, r.tx.times, "no timing left behind")
		})
	}
}

// logprobSetter is an engine whose transcript logprobs can be set (only that is called).
type logprobSetter struct {
	Engine
	set []bool
}

func (e *logprobSetter) SetTranscriptLogprobs(_ context.Context, on bool) error {
	e.set = append(e.set, on)
	return nil
}

// TestTranscriberSyncLogprobs checks that the stream's logprobs setting follows the session's
// through a queued job, and stays as it was when there is no stream, nothing to change, no
// setter, or no room in the queue.
func TestTranscriberSyncLogprobs(t *testing.T) {
	cases := []struct {
		name     string
		engine   Engine
		streamOn bool
		want     bool // the session wants logprobs
		full     bool
		result   bool
		job      bool
	}{
		{name: "turned on by a job", engine: &logprobSetter{}, want: true, result: true, job: true},
		{name: "turned off by a job", engine: &logprobSetter{}, streamOn: true, result: false, job: true},
		{name: "no stream", want: true},
		{name: "already so", engine: &logprobSetter{}, streamOn: true, want: true, result: true},
		{name: "engine without the setting", engine: struct{ Engine }{}, want: true},
		{name: "queue full", engine: &logprobSetter{}, want: true, full: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newTxRig(false, txConfig{transcripts: true, logprobs: tc.want})
			r.full = tc.full
			require.Equal(t, tc.result, r.tx.syncLogprobs(tc.engine, tc.streamOn))
			if !tc.job {
				require.Empty(t, r.jobs)
				return
			}
			require.Len(t, r.jobs, 1)
			res := r.jobs[0].run(t.Context())
			require.NoError(t, res.err)
			require.Equal(t, []bool{tc.result}, tc.engine.(*logprobSetter).set)
		})
	}
}

// completed, jobFailed and committed: a transcript's end, a failed transcription job, and a
// committed item, each as input transcription and a transcription session take it.
func TestTranscriberCompletedAndFailed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		session   bool
		cfg       txConfig
		wantPhase []Phase
	}{
		{"transcription off: the item only", false, txConfig{}, nil},
		{"input transcription", false, txConfig{transcripts: true}, []Phase{PhaseCompleted}},
		{"transcription session", true, txConfig{transcripts: true}, []Phase{PhaseCompleted}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTxRig(tc.session, tc.cfg)
			it := &item{ID: "item_1", Role: "user", Type: "message", Audio: true, AudioMs: 1500}
			r.conv.insert(it, "")
			r.tx.committed(it.ID)
			r.tx.completed(it.ID, duplex.Transcription{Text: "go on"})
			require.Equal(t, "go on", it.Transcript)
			var phases []Phase
			for _, e := range r.events {
				tr := e.(Transcription)
				if tr.Phase == PhaseDelta {
					continue // the words no delta had told yet (finishDeltas)
				}
				phases = append(phases, tr.Phase)
				require.Equal(t, "go on", tr.Text)
				require.InDelta(t, 1.5, *tr.AudioSeconds, 1e-9)
				require.Nil(t, tr.Logprobs, "not asked for")
			}
			require.Equal(t, tc.wantPhase, phases)

			r.events = nil
			r.tx.jobFailed("", "runtime_append_failed", errors.New("down"), false)
			require.Empty(t, r.events, "no item: nothing to tell")
			r.tx.jobFailed(it.ID, "runtime_append_failed", errors.New("down"), false)
			if !tc.session {
				require.Empty(t, r.events, "a conversation tells the job's error, not a failed item")
				return
			}
			require.Len(t, r.events, 1)
			failed := r.events[0].(Transcription)
			require.Equal(t, PhaseFailed, failed.Phase)
			require.Equal(t, "engine: down", failed.Error.Message)
		})
	}
}
