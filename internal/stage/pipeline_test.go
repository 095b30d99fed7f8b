package stage

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/speech"
)

const unitSamples = 1600 // 100 ms at 16 kHz

// feedUnits sends pcm in 100 ms units and returns how many units it sent.
func feedUnits(t *testing.T, d *DuplexStream, pcm []float32) int {
	t.Helper()
	n := 0
	for off := 0; off < len(pcm); off += unitSamples {
		require.NoError(t, d.AppendAudio(context.Background(), 0, pcm[off:min(off+unitSamples, len(pcm))]))
		n++
	}
	return n
}

// wordOverlap is the share of want's words found in got.
func wordOverlap(got, want string) float64 {
	have := map[string]bool{}
	for _, w := range strings.Fields(strings.ToLower(got)) {
		have[w] = true
	}
	ws := strings.Fields(want)
	hit := 0
	for _, w := range ws {
		if have[w] {
			hit++
		}
	}
	return float64(hit) / float64(len(ws))
}

// TestDuplexSpeechToSpeech feeds real speech and 1 s of silence in 100 ms units and checks the
// whole cascade: listen decisions, one speak at the endpoint, the transcript, streamed text
// from stage 0, 24 kHz audio from stage 1, stage metrics of both stages, and connector
// accounting equal to the bytes actually sent.
func TestDuplexSpeechToSpeech(t *testing.T) {
	p, eng := newLongReplyPipeline(t, nil)
	sink := newRecSink(t)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{AutoResponse: true, WantAudio: true, MaxTokens: 24, Instructions: "You are a helpful robot."}, RequestID: "duplex-test"}, sink)
	require.NoError(t, err)
	defer d.Close()

	pcm := append(goForward(t), make([]float32, 16000)...)
	units := feedUnits(t, d, pcm)
	require.True(t, sink.waitFor(30*time.Second, finishedTurn(1)), "no Finished output for turn 1")

	outs, sms, txs := sink.snapshot()
	decisions := ofKind(outs, duplex.OutDecision)
	require.Len(t, decisions, units, "one decision per unit")
	speaks := 0
	for i, o := range decisions {
		require.Equal(t, 0, o.StageID)
		if o.Decision == duplex.DecisionSpeak {
			speaks++
			require.Equal(t, 1, o.Turn)
			require.Greater(t, i, units/2, "speak only after the speech ended")
			continue
		}
		require.Equal(t, duplex.DecisionListen, o.Decision)
	}
	require.Equal(t, 1, speaks)

	trs := ofKind(outs, duplex.OutTranscript)
	require.Len(t, trs, 1)
	require.GreaterOrEqual(t, wordOverlap(trs[0].Text, "go forward ten meters"), 0.75, "transcript %q", trs[0].Text)

	texts := ofKind(outs, duplex.OutText)
	require.NotEmpty(t, texts)
	var textBytes int64
	for _, o := range texts {
		require.Equal(t, 0, o.StageID)
		require.Equal(t, 1, o.Turn)
		textBytes += int64(len(o.Text))
	}
	audios := ofKind(outs, duplex.OutAudio)
	require.NotEmpty(t, audios)
	frames := 0
	for _, o := range audios {
		require.Equal(t, 1, o.StageID)
		require.Equal(t, 24000, o.SampleRate)
		require.NotEmpty(t, o.Audio)
		require.NotEmpty(t, o.Text)
		frames += len(o.Audio)
	}
	// The talker speaks exactly the generated words, phrase by phrase, and the first phrase is
	// short (first_max_words), so the first audio did not wait for the whole reply.
	require.Equal(t, strings.Fields(joinText(texts)), strings.Fields(joinText(audios)))
	require.Len(t, strings.Fields(audios[0].Text), p.cfg.Talker.Phrase.FirstMaxWords)
	require.Greater(t, len(audios), 1)

	fin := ofKind(outs, duplex.OutFinished)
	require.Len(t, fin, 1)
	require.Equal(t, 1, fin[0].StageID)
	require.Equal(t, duplex.FinishLength, fin[0].FinishReason)
	require.Equal(t, duplex.OutFinished, outs[len(outs)-1].Kind, "Finished is the last output")

	// Connector accounting: TX events sum to the bytes of the text pieces, and so does RX.
	var txBytes int64
	for _, e := range txs {
		require.Equal(t, 0, e.From)
		require.Equal(t, 1, e.To)
		require.Equal(t, "duplex-test", e.RequestID)
		txBytes += e.SizeBytes
	}
	require.Equal(t, textBytes, txBytes)
	require.Len(t, txs, len(texts))

	var s0resp, s1 *StageMetricsMessage
	listenUnits := 0
	for i := range sms {
		m := &sms[i]
		require.Positive(t, m.StageSubmitTS)
		switch {
		case m.StageID == 1:
			s1 = m
		case m.Metrics.NumTokensOut > 0:
			s0resp = m
		default:
			listenUnits++
		}
	}
	require.GreaterOrEqual(t, listenUnits, units, "a snapshot per unit, plus prefills")
	require.NotNil(t, s0resp)
	require.Equal(t, 1, s0resp.Turn)
	require.Equal(t, 24, s0resp.Metrics.NumTokensOut)
	require.Positive(t, s0resp.Metrics.NumTokensIn)
	require.Positive(t, s0resp.Metrics.VllmTtftMs)
	require.Len(t, s0resp.Metrics.VllmItlsMs, 23)
	require.Positive(t, s0resp.Metrics.BatchSize)
	require.Equal(t, "text", s0resp.Metrics.OutputUnitType)
	require.NotNil(t, s1)
	require.Equal(t, 1, s1.Turn)
	require.Equal(t, "audio", s1.Metrics.OutputUnitType)
	require.Equal(t, 24000, s1.Metrics.AudioSampleRate)
	require.Equal(t, frames, s1.Metrics.AudioGeneratedFrames)
	require.InDelta(t, float64(frames)/24000, s1.Metrics.AudioDurationS, 1e-9)
	require.Positive(t, s1.Metrics.StageGenTimeMs)
	require.Equal(t, int(txBytes), s1.Metrics.RxTransferBytes)
	require.Positive(t, s1.Metrics.RxInFlightTimeMs)
	require.Equal(t, len(audios), s1.Metrics.OutputUnitCount)

	d.Close()
	require.Equal(t, 0, eng.LiveSequences())
}

// TestDuplexManualTurns: without AutoResponse the stream only listens until Commit; Respond and
// AppendText drive the conversation, and a second turn continues the same sequence.
func TestDuplexManualTurns(t *testing.T) {
	p, eng := newTestPipeline(t, nil)
	sink := newRecSink(t)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{MaxTokens: 8}, RequestID: "duplex-manual"}, sink)
	require.NoError(t, err)
	defer d.Close()

	units := feedUnits(t, d, append(goForward(t), make([]float32, 16000)...))
	require.True(t, sink.waitFor(5*time.Second, func(o []OutputMessage) bool { return len(ofKind(o, duplex.OutDecision)) == units }))
	outs, _, _ := sink.snapshot()
	for _, o := range ofKind(outs, duplex.OutDecision) {
		require.Equal(t, duplex.DecisionListen, o.Decision)
	}
	require.Len(t, ofKind(outs, duplex.OutDecision), units)
	require.Empty(t, ofKind(outs, duplex.OutTranscript))

	tr, err := d.commit(context.Background(), 0, false)
	require.NoError(t, err)
	require.GreaterOrEqual(t, wordOverlap(tr.Text, "go forward ten meters"), 0.75, "transcript %q", tr.Text)
	require.Nil(t, tr.Logprobs, "logprobs were not asked for")
	_, err = d.commit(context.Background(), 0, false)
	require.ErrorIs(t, err, audio.ErrEmptyAudio, "nothing heard since the last commit")

	turn, err := d.Respond(context.Background(), 0, 0)
	require.NoError(t, err)
	require.Equal(t, 1, turn)
	require.True(t, sink.waitFor(20*time.Second, finishedTurn(1)))

	require.NoError(t, d.AppendText(context.Background(), 0, "user", "and then turn left"))
	turn, err = d.Respond(context.Background(), 0, 5)
	require.NoError(t, err)
	require.Equal(t, 2, turn)
	require.True(t, sink.waitFor(20*time.Second, finishedTurn(2)))
	outs, _, _ = sink.snapshot()
	fin := ofKind(outs, duplex.OutFinished)
	require.Len(t, fin, 2)
	require.Equal(t, 0, fin[0].StageID, "text only: stage 0 is final")
	require.Empty(t, ofKind(outs, duplex.OutAudio))
	n := 0
	for _, o := range ofKind(outs, duplex.OutText) {
		if o.Turn == 2 {
			n++
		}
	}
	require.Equal(t, 5, n)
	require.Greater(t, d.conv.seq.HistoryLen(), 20, "both turns live in one sequence")
	require.Equal(t, 1, eng.LiveSequences())
	d.Close()
	require.Equal(t, 0, eng.LiveSequences())
}

func TestChat(t *testing.T) {
	p, eng := newLongReplyPipeline(t, nil)
	speechPCM := goForward(t)
	tests := []struct {
		name      string
		msgs      []ChatMessage
		wantAudio bool
	}{
		{name: "text", msgs: []ChatMessage{{Role: "system", Text: "Be brief."}, {Role: "user", Text: "Say hello."}}},
		{name: "audio part", msgs: []ChatMessage{{Role: "user", Text: "Listen:", Audio: speechPCM}}, wantAudio: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := newRecSink(t)
			submitted := metrics.Now()
			r, err := p.SubmitChat(context.Background(), ChatRequest{
				RequestID: "chatcmpl-" + strings.ReplaceAll(tt.name, " ", ""), Messages: tt.msgs, MaxTokens: 12, WantAudio: tt.wantAudio,
			}, sink)
			require.NoError(t, err)
			select {
			case <-r.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("chat did not finish")
			}
			elapsedMs := (metrics.Now() - submitted) * 1000
			outs, sms, txs := sink.snapshot()
			require.Len(t, ofKind(outs, duplex.OutText), 12)
			fin := ofKind(outs, duplex.OutFinished)
			require.Len(t, fin, 1)
			require.Equal(t, duplex.FinishLength, fin[0].FinishReason)
			require.Equal(t, duplex.OutFinished, outs[len(outs)-1].Kind)
			if tt.wantAudio {
				require.Equal(t, 1, fin[0].StageID)
				require.NotEmpty(t, ofKind(outs, duplex.OutAudio))
				require.Len(t, sms, 2)
				require.Len(t, txs, 12)
			} else {
				require.Equal(t, 0, fin[0].StageID)
				require.Empty(t, ofKind(outs, duplex.OutAudio))
				require.Len(t, sms, 1)
				require.Empty(t, txs)
			}
			s0 := sms[0]
			require.Equal(t, 0, s0.StageID)
			require.Equal(t, 12, s0.Metrics.NumTokensOut)
			// The audio part was transcribed into the prompt: many more tokens than "Listen:".
			require.Greater(t, s0.Metrics.NumTokensIn, 5)
			// The transcription is the input's preprocessing: its own figure, on every stage's
			// snapshot (the tables read it from the first and the last), outside stage 0's
			// generation time and before stage 0's submit time.
			pre, ok := s0.Metrics.PipelineTimings["preprocess_ms"]
			if !tt.wantAudio {
				require.False(t, ok, "a text request has no preprocessing")
			} else {
				require.True(t, ok)
				require.Greater(t, pre, 0.0)
				require.Equal(t, pre, sms[1].Metrics.PipelineTimings["preprocess_ms"])
				require.GreaterOrEqual(t, s0.StageSubmitTS-submitted, pre/1000-0.001, "stage 0 starts after the ASR")
				require.LessOrEqual(t, s0.Metrics.StageGenTimeMs+pre, elapsedMs+1, "ASR time is not generation time")
			}
			require.Equal(t, 0, eng.LiveSequences())
		})
	}
}

// TestAbort aborts a long audio chat mid-generation while another request runs: no output of
// the aborted request reaches its Sink after Abort returns, only one abort snapshot per stage
// with the work done so far; its sequence and queues are released, and the other request
// finishes normally.
func TestAbort(t *testing.T) {
	p, eng := newLongReplyPipeline(t, func(c *PipelineConfig) { c.Connectors[0].Capacity = 4 })
	ctx := context.Background()
	long := ChatRequest{RequestID: "chat-long", Messages: []ChatMessage{{Role: "user", Text: "Talk forever."}}, MaxTokens: 4000, WantAudio: true}
	short := ChatRequest{RequestID: "chat-short", Messages: []ChatMessage{{Role: "user", Text: "Be short."}}, MaxTokens: 16, WantAudio: true}

	sinkLong, sinkShort := newRecSink(t), newRecSink(t)
	// A slow consumer: at abort, the long request has events queued for delivery, and none of
	// them may arrive after Abort returns.
	sinkLong.delay = 2 * time.Millisecond
	rl, err := p.SubmitChat(ctx, long, sinkLong)
	require.NoError(t, err)
	rs, err := p.SubmitChat(ctx, short, sinkShort)
	require.NoError(t, err)

	require.True(t, sinkLong.waitFor(20*time.Second, func(o []OutputMessage) bool { return len(ofKind(o, duplex.OutAudio)) > 0 }))
	rl.Abort()
	outsAtAbort, smsAtAbort, txAtAbort := sinkLong.snapshot()
	select {
	case <-rl.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("aborted request did not stop")
	}
	outs, sms, txs := sinkLong.snapshot()
	// One output or transfer call may have been in progress while Abort ran; nothing after that
	// but the stage metrics of the work done.
	require.LessOrEqual(t, len(outs)+len(txs), len(outsAtAbort)+len(txAtAbort)+1)
	require.Empty(t, ofKind(outs, duplex.OutFinished))
	require.Less(t, len(ofKind(outs, duplex.OutText)), 4000)
	require.Empty(t, smsAtAbort, "a running chat request has no stage metrics yet")
	requireAbortMetrics(t, sms, 1, outs)

	select {
	case <-rs.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("concurrent request did not finish")
	}
	outsS, _, _ := sinkShort.snapshot()
	fin := ofKind(outsS, duplex.OutFinished)
	require.Len(t, fin, 1)
	require.Equal(t, duplex.FinishLength, fin[0].FinishReason)
	require.Len(t, ofKind(outsS, duplex.OutText), 16)

	require.Equal(t, 0, eng.LiveSequences())
	require.Equal(t, 0, p.thinker.Pending())
	require.Equal(t, 0, p.talker.Pending())
}

// TestDuplexCancelResponse: barge-in aborts the talker and thinker of the current turn at once;
// the stream keeps listening and answers the next turn.
func TestDuplexCancelResponse(t *testing.T) {
	p, eng := newTestPipeline(t, func(c *PipelineConfig) { c.Connectors[0].Capacity = 4 })
	sink := newRecSink(t)
	sink.delay = 2 * time.Millisecond // events of the cancelled turn are still queued at cancel
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{WantAudio: true, MaxTokens: 4000}, RequestID: "duplex-cancel"}, sink)
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.AppendText(context.Background(), 0, "user", "tell me a long story"))
	turn, err := d.Respond(context.Background(), 0, 0)
	require.NoError(t, err)
	require.True(t, sink.waitFor(20*time.Second, func(o []OutputMessage) bool { return len(ofKind(o, duplex.OutAudio)) > 0 }))
	d.CancelResponse(false)
	atCancel, _, _ := sink.snapshot()
	// The stream still listens and still answers.
	require.NoError(t, d.AppendAudio(context.Background(), 0, make([]float32, unitSamples)))
	turn2, err := d.Respond(context.Background(), 0, 6)
	require.NoError(t, err)
	require.Equal(t, turn+1, turn2)
	require.True(t, sink.waitFor(20*time.Second, finishedTurn(turn2)))
	outs, sms, _ := sink.snapshot()
	late := 0
	for _, o := range outs[len(atCancel):] {
		if o.Turn == turn {
			late++
		}
	}
	require.LessOrEqual(t, late, 1, "at most the one call in progress at cancel")
	for _, o := range ofKind(outs, duplex.OutFinished) {
		require.Equal(t, turn2, o.Turn, "the cancelled turn gets no Finished")
	}
	var turnOuts []OutputMessage
	for _, o := range outs {
		if o.Turn == turn {
			turnOuts = append(turnOuts, o)
		}
	}
	// The cancelled turn's stages still report their work; turn 2 finished normally.
	requireAbortMetrics(t, sms, turn, turnOuts)
	// The turn's end comes after both stages' partial snapshots: a statistics consumer may
	// finalize the interrupted turn at it and lose nothing.
	end, before, ok := sink.turnEnd(turn)
	require.True(t, ok, "the cancelled turn's end is reported")
	require.True(t, end.Aborted)
	stagesBefore := map[int]bool{}
	for _, m := range before {
		if m.Turn == turn && m.Metrics.FinishReason == duplex.FinishAbort {
			stagesBefore[m.StageID] = true
		}
	}
	require.Equal(t, map[int]bool{0: true, 1: true}, stagesBefore, "both stages' abort rows precede the end")
	_, _, txs := sink.snapshot()
	for _, tx := range txs {
		require.LessOrEqual(t, tx.Turn, turn2, "transfers carry their turn")
		require.GreaterOrEqual(t, tx.Turn, turn)
	}
	for _, m := range sms {
		if m.Turn == turn2 && m.Metrics.FinishReason != "" {
			require.Equal(t, duplex.FinishLength, m.Metrics.FinishReason, "stage %d", m.StageID)
		}
	}
	d.Close()
	require.Equal(t, 0, eng.LiveSequences())
	require.Equal(t, 0, p.talker.Pending())
}

func TestBadInput(t *testing.T) {
	p, _ := newTestPipeline(t, nil)
	ctx := context.Background()
	sink := newRecSink(t)
	d, err := p.OpenDuplex(ctx, DuplexOptions{}, sink)
	require.NoError(t, err)
	defer d.Close()
	nan := []float32{0, float32(math.NaN())}
	inf := []float32{float32(math.Inf(1))}

	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"empty audio", func() error { return d.AppendAudio(ctx, 0, nil) }, audio.ErrEmptyAudio},
		{"nan audio", func() error { return d.AppendAudio(ctx, 0, nan) }, audio.ErrNonFinite},
		{"inf audio", func() error { return d.AppendAudio(ctx, 0, inf) }, audio.ErrNonFinite},
		{"commit nothing", func() error { _, err := d.commit(ctx, 0, true); return err }, audio.ErrEmptyAudio},
		{"whitespace text", func() error { return d.AppendText(ctx, 0, "user", " \n\t") }, audio.ErrEmptyText},
		{"bad role", func() error { return d.AppendText(ctx, 0, "robot", "hi") }, ErrInvalidRequest},
		{"unsupported vad rate", func() error {
			_, err := p.OpenDuplex(ctx, DuplexOptions{VAD: speech.VADConfig{SampleRate: 44100}}, sink)
			return err
		}, audio.ErrUnsupportedRate},
		{"chat no messages", func() error { _, err := p.SubmitChat(ctx, ChatRequest{}, sink); return err }, ErrInvalidRequest},
		{"chat whitespace", func() error {
			_, err := p.SubmitChat(ctx, ChatRequest{Messages: []ChatMessage{{Role: "user", Text: "  "}}}, sink)
			return err
		}, audio.ErrEmptyText},
		{"chat empty audio", func() error {
			_, err := p.SubmitChat(ctx, ChatRequest{Messages: []ChatMessage{{Role: "user", Audio: []float32{}}}}, sink)
			return err
		}, audio.ErrEmptyAudio},
		{"chat nan audio", func() error {
			_, err := p.SubmitChat(ctx, ChatRequest{Messages: []ChatMessage{{Role: "user", Audio: nan}}}, sink)
			return err
		}, audio.ErrNonFinite},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorIs(t, tt.call(), tt.want)
		})
	}
	outs, sms, _ := sink.snapshot()
	require.Empty(t, outs, "rejected input produces no output")
	require.Empty(t, sms)

	d.Close()
	require.ErrorIs(t, d.AppendAudio(ctx, 0, make([]float32, 160)), ErrClosed)
	_, err = d.Respond(ctx, 0, 1)
	require.ErrorIs(t, err, ErrClosed)
}

// TestPipelineClose aborts live work and refuses new work.
func TestPipelineClose(t *testing.T) {
	p, eng := newTestPipeline(t, nil)
	sink := newRecSink(t)
	_, err := p.SubmitChat(context.Background(), ChatRequest{Messages: []ChatMessage{{Role: "user", Text: "go"}}, MaxTokens: 4000, WantAudio: true}, sink)
	require.NoError(t, err)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{AutoResponse: true}}, sink)
	require.NoError(t, err)
	require.True(t, sink.waitFor(20*time.Second, func(o []OutputMessage) bool { return len(ofKind(o, duplex.OutText)) > 0 }))
	p.Close()
	require.Equal(t, 0, eng.LiveSequences())
	_, err = p.SubmitChat(context.Background(), ChatRequest{Messages: []ChatMessage{{Role: "user", Text: "go"}}}, sink)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, d.AppendAudio(context.Background(), 0, make([]float32, 160)), ErrClosed)
}

// TestChatContextCancel: cancelling the caller's ctx aborts like Abort does.
func TestChatContextCancel(t *testing.T) {
	p, eng := newTestPipeline(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	sink := newRecSink(t)
	r, err := p.SubmitChat(ctx, ChatRequest{Messages: []ChatMessage{{Role: "user", Text: "go on"}}, MaxTokens: 4000, WantAudio: true}, sink)
	require.NoError(t, err)
	require.True(t, sink.waitFor(20*time.Second, func(o []OutputMessage) bool { return len(ofKind(o, duplex.OutText)) > 0 }))
	cancel()
	select {
	case <-r.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("cancelled request did not stop")
	}
	outs, sms, _ := sink.snapshot()
	require.Empty(t, ofKind(outs, duplex.OutFinished))
	// Stage 0 did work; the talker reports only when it had received text by then.
	require.NotEmpty(t, sms)
	require.Equal(t, 0, sms[0].StageID)
	for _, m := range sms {
		require.Equal(t, duplex.FinishAbort, m.Metrics.FinishReason, "stage %d", m.StageID)
	}
	require.Equal(t, 0, eng.LiveSequences())
	require.Equal(t, 0, p.thinker.Pending())
	require.Equal(t, 0, p.talker.Pending())
}

// requireAbortMetrics checks the stage metrics of an aborted turn that was speaking: exactly one
// snapshot per stage, stage 0 first, reason abort, with the work the delivered outputs show.
func requireAbortMetrics(t *testing.T, sms []StageMetricsMessage, turn int, outs []OutputMessage) {
	t.Helper()
	var got []StageMetricsMessage
	for _, m := range sms {
		if m.Turn == turn && m.Metrics.FinishReason != "" { // listen-side prefill snapshots have none
			got = append(got, m)
		}
	}
	require.Len(t, got, 2, "one snapshot per stage: %+v", got)
	th, ta := got[0], got[1]
	require.Equal(t, 0, th.StageID)
	require.Equal(t, 1, ta.StageID)
	texts, audio, samples := ofKind(outs, duplex.OutText), ofKind(outs, duplex.OutAudio), 0
	for _, a := range audio {
		samples += len(a.Audio)
	}
	require.Equal(t, duplex.FinishAbort, th.Metrics.FinishReason)
	require.Positive(t, th.Metrics.NumTokensIn)
	require.GreaterOrEqual(t, th.Metrics.NumTokensOut, len(texts), "tokens generated, delivered or not")
	require.Len(t, th.Metrics.VllmItlsMs, th.Metrics.NumTokensOut-1)
	require.Positive(t, th.Metrics.VllmTtftMs)
	require.Positive(t, th.Metrics.StageGenTimeMs)
	require.Equal(t, duplex.FinishAbort, ta.Metrics.FinishReason)
	require.GreaterOrEqual(t, ta.Metrics.AudioGeneratedFrames, samples, "frames synthesized, delivered or not")
	require.Positive(t, ta.Metrics.AudioGeneratedFrames)
	require.GreaterOrEqual(t, ta.Metrics.OutputUnitCount, len(audio))
	require.Positive(t, ta.Metrics.RxTransferBytes)
	require.Positive(t, ta.Metrics.NumTokensIn)
	require.Positive(t, ta.Metrics.StageGenTimeMs)
}

// CancelTurn stops one response and leaves the one queued behind it alone: the session uses it
// for a cancel that raced its response's start, when the client may already have asked for the
// next response.
func TestDuplexCancelTurnSparesQueuedResponse(t *testing.T) {
	p, eng := newTestPipeline(t, nil)
	sink := newRecSink(t)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{WantAudio: true, MaxTokens: 4000}, RequestID: "duplex-cancel-turn"}, sink)
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.AppendText(context.Background(), 0, "user", "tell me a long story"))
	first, err := d.Respond(context.Background(), 0, 0)
	require.NoError(t, err)
	second, err := d.Respond(context.Background(), 0, 6)
	require.NoError(t, err)
	require.Equal(t, first+1, second)
	require.True(t, sink.waitFor(20*time.Second, func(o []OutputMessage) bool { return len(ofKind(o, duplex.OutText)) > 0 }))
	d.CancelTurn(first, false)
	require.True(t, sink.waitFor(20*time.Second, finishedTurn(second)), "the queued response still runs to its end")
	outs, _, _ := sink.snapshot()
	for _, o := range ofKind(outs, duplex.OutFinished) {
		require.Equal(t, second, o.Turn, "the cancelled turn gets no Finished")
	}
	d.Close()
	require.Equal(t, 0, eng.LiveSequences())
}

// SettleInput answers, through the Sink, after every row of the input given before it: the
// listen units' snapshots and the prefill of the committed utterance (which runs later, on the
// sequence goroutine). Its TurnEnd names the upcoming turn and says InputSettled; no response
// of that number ran, so the next Respond still gets it.
func TestDuplexSettleInputFollowsTheInputsRows(t *testing.T) {
	p, _ := newTestPipeline(t, nil)
	sink := newRecSink(t)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{MaxTokens: 4}, RequestID: "duplex-settle"}, sink)
	require.NoError(t, err)
	defer d.Close()
	units := feedUnits(t, d, goForward(t))
	_, err = d.commit(context.Background(), 0, false)
	require.NoError(t, err)
	require.NoError(t, d.SettleInput(context.Background(), 0))
	var end TurnEnd
	var before []StageMetricsMessage
	require.Eventually(t, func() bool {
		var ok bool
		end, before, ok = sink.turnEnd(1)
		return ok
	}, 10*time.Second, 5*time.Millisecond)
	require.True(t, end.InputSettled)
	require.GreaterOrEqual(t, len(before), units+1, "every listen unit's row and the prefill came first")
	tokensIn := 0
	for _, m := range before {
		require.Equal(t, 1, m.Turn)
		tokensIn += m.Metrics.NumTokensIn
	}
	require.Positive(t, tokensIn, "the committed utterance's prefill")
	turn, err := d.Respond(context.Background(), 0, 0)
	require.NoError(t, err)
	require.Equal(t, 1, turn, "the settled input's turn number is the next response's")
	require.True(t, sink.waitFor(20*time.Second, finishedTurn(1)))
}
