package realtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/benchreport"
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// The transcription-session ramp (?intent=transcription): n sessions at once, each streaming
// utterances of real speech at real time with server VAD, no thinker or talker involved. A step
// keeps up when every item was transcribed correctly within txMaxDone of its speech end, no
// append fell txMaxLag behind the audio clock, and nothing failed.
const (
	// txSilenceMs is the VAD's silence window: the speech end is audio_end_ms less it.
	txSilenceMs = 500
	// txTailBytes is the silence after each utterance (1.5 s of 16 kHz PCM16), as the
	// transcription tests stream it: longer than the silence window, so the VAD ends the turn.
	txTailBytes = 48000
	// txMaxDone bounds speech end → completed for a step that keeps up: the 500 ms silence
	// window the VAD waits by definition, plus 500 ms for the final hypothesis and any lag.
	txMaxDone = time.Second
	// txMaxLag bounds an append's lag behind the audio clock, as bench speech's --max-lag.
	txMaxLag = 400 * time.Millisecond
	// txWait is how long a session waits for its last items after its stream ended.
	txWait = 5 * time.Second
	// chunkBytes is one 100 ms append of 16 kHz PCM16.
	chunkBytes = 3200
)

// txSteps are the concurrencies of the transcription ramp: the realtime-session steps up to
// maxN, and maxN itself.
func txSteps(maxN int) []int {
	var out []int
	for _, n := range sessionSteps() {
		if n <= maxN {
			out = append(out, n)
		}
	}
	if maxN > 0 && !slices.Contains(out, maxN) {
		out = append(out, maxN)
	}
	return out
}

// txStep is what one concurrency step measured.
type txStep struct {
	n        int
	expected int       // items: sessions × utterances
	done     []float64 // ms, speech end → .completed received, per completed item
	lags     []float64 // ms, append written − its time on the audio clock, per append
	wrong    int       // items whose transcript differs from the reference's, or extra items
	errEvs   int       // error events
	failed   int       // .failed items
	missing  int       // expected items with no .completed within txWait after the stream
}

// errors is every way the step lost or refused an item.
func (s txStep) errors() int { return s.errEvs + s.failed + s.missing }

// keepsUp is the step's verdict: every item completed, correctly, within txMaxDone of its
// speech end; every append within txMaxLag of the audio clock; no error event.
func (s txStep) keepsUp() bool {
	if s.errors() > 0 || s.wrong > 0 || len(s.done) != s.expected {
		return false
	}
	for _, d := range s.done {
		if d > float64(txMaxDone.Milliseconds()) {
			return false
		}
	}
	for _, l := range s.lags {
		if l >= float64(txMaxLag.Milliseconds()) {
			return false
		}
	}
	return true
}

// txResult is one session's stream as its client saw it.
type txResult struct {
	transcripts []string  // .completed transcripts, in arrival order
	done        []float64 // ms, speech end → .completed received
	lags        []float64 // ms, per append
	errEvs      int
	failed      int
	noStop      int // .completed items without a speech_stopped: no speech end to time from
}

// txStream is utterances × (speech + 1.5 s of silence), 16 kHz PCM16.
func txStream(pcm []byte, utterances int) []byte {
	unit := append(append([]byte{}, pcm...), make([]byte, txTailBytes)...)
	return slices.Repeat(unit, utterances)
}

// txSession opens a GA transcription session with server VAD (silence window txSilenceMs),
// streams stream in 100 ms appends (paced: each when its last sample is due on the audio
// clock, as from a microphone; else as fast as the socket takes them), and waits until want
// items are completed or failed, or txWait after the stream. The audio clock starts at the
// first append's due time less 100 ms. The speech end of an item is the audio clock at its
// speech_stopped's audio_end_ms less the silence window (audio_end_ms includes it, as OpenAI's
// does): the moment the speaker stopped, as the VAD heard it.
func txSession(ctx context.Context, url string, stream []byte, want int, paced bool) (txResult, error) {
	c, err := dial(ctx, url+"?intent=transcription")
	if err != nil {
		return txResult{}, err
	}
	defer c.ws.CloseNow()
	if err := c.send(map[string]any{"type": "session.update", "session": map[string]any{
		"type": "transcription",
		"audio": map[string]any{"input": map[string]any{
			"format":        map[string]any{"type": "audio/pcm", "rate": 16000},
			"transcription": map[string]any{"model": "gpt-4o-transcribe", "language": "en"},
			"turn_detection": map[string]any{"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
				"silence_duration_ms": txSilenceMs},
		}},
	}}); err != nil {
		return txResult{}, err
	}
	if _, err := c.until("session.updated", 10*time.Second); err != nil {
		return txResult{}, err
	}

	// res and stopped belong to the reader until readDone is closed.
	var res txResult
	stopped := map[string]int{} // item id → audio_end_ms
	finished := make(chan struct{})
	readDone := make(chan struct{})
	start := time.Now() // the audio clock's zero
	// The reader, until the connection closes; waited for below.
	go func() {
		defer close(readDone)
		closed := false
		for {
			_, b, err := c.ws.Read(ctx)
			if err != nil {
				return
			}
			at := time.Now()
			ev, _, err := protocol.DecodeServerEvent(b)
			if err != nil {
				res.errEvs++
				continue
			}
			switch e := ev.(type) {
			case protocol.InputAudioBufferSpeechStopped:
				stopped[e.ItemID] = e.AudioEndMs
			case protocol.TranscriptionCompleted:
				res.transcripts = append(res.transcripts, e.Transcript)
				if endMs, ok := stopped[e.ItemID]; ok {
					end := start.Add(time.Duration(endMs-txSilenceMs) * time.Millisecond)
					res.done = append(res.done, float64(at.Sub(end).Microseconds())/1000)
				} else {
					res.noStop++
				}
			case protocol.TranscriptionFailed:
				res.failed++
			case protocol.ErrorEvent:
				res.errEvs++
			}
			if !closed && len(res.transcripts)+res.failed >= want {
				closed = true
				close(finished)
			}
		}
	}()

	var lags []float64
	var sendErr error
	for k := 0; k*chunkBytes < len(stream); k++ {
		due := start
		if paced { // as a microphone gives it: once its 100 ms have been spoken
			due = start.Add(time.Duration(k+1) * 100 * time.Millisecond)
			time.Sleep(time.Until(due))
		}
		off := k * chunkBytes
		if sendErr = c.send(appendEv(stream[off:min(off+chunkBytes, len(stream))])); sendErr != nil {
			break
		}
		if paced {
			lags = append(lags, float64(time.Since(due).Microseconds())/1000)
		}
	}
	if sendErr == nil {
		select {
		case <-finished:
		case <-time.After(txWait):
		case <-ctx.Done():
			sendErr = ctx.Err()
		}
	}
	_ = c.ws.CloseNow()
	<-readDone
	res.lags = lags
	return res, sendErr
}

// benchTxSessions runs the transcription ramp: first one session fed the stream as a burst
// gives the reference transcripts (recognition is deterministic: the same audio gives the same
// transcript, so a different one under load means audio was lost or mixed up), then each step
// of txSteps(maxN) until the first that does not keep up. It returns the steps measured and the
// largest n that kept up.
func benchTxSessions(ctx context.Context, url string, m *session.Manager, pcm []byte, maxN, utterances int, out io.Writer, prog bench.Progress) ([]txStep, int, error) {
	stream := txStream(pcm, utterances)
	ref, err := txSession(ctx, url, stream, utterances, false)
	if err != nil {
		return nil, 0, fmt.Errorf("reference session: %w", err)
	}
	if len(ref.transcripts) != utterances || ref.failed+ref.errEvs > 0 || slices.Contains(ref.transcripts, "") {
		return nil, 0, fmt.Errorf("reference session: %d utterances gave transcripts %q (%d failed, %d errors): the speech does not make one item per utterance",
			utterances, ref.transcripts, ref.failed, ref.errEvs)
	}
	fmt.Fprintf(out, "tx reference transcripts: %q\n", ref.transcripts)
	prog.Add(1)
	var steps []txStep
	best := 0
	for _, n := range txSteps(maxN) {
		waitIdle(m)
		st, err := txStepAt(ctx, url, stream, ref.transcripts, n)
		if err != nil {
			return steps, best, err
		}
		steps = append(steps, st)
		q := benchreport.Quantile
		fmt.Fprintf(out, "tx_sessions=%d items=%d/%d done_ms p50=%.0f p90=%.0f max=%.0f append_lag_ms max=%.0f wrong=%d errors=%d (error events %d, failed %d, missing %d) realtime=%v\n",
			n, len(st.done), st.expected, q(st.done, 50), q(st.done, 90), maxOf(st.done), maxOf(st.lags), st.wrong,
			st.errors(), st.errEvs, st.failed, st.missing, st.keepsUp())
		prog.Add(1)
		if !st.keepsUp() {
			break
		}
		best = n
	}
	return steps, best, nil
}

// waitIdle waits (up to 10 s) until the previous step's sessions have closed.
func waitIdle(m *session.Manager) {
	for deadline := time.Now().Add(10 * time.Second); m.Active() > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
}

// txStepAt runs n paced transcription sessions at once and scores them against ref.
func txStepAt(ctx context.Context, url string, stream []byte, ref []string, n int) (txStep, error) {
	results := make([]txResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i], errs[i] = txSession(ctx, url, stream, len(ref), true) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return txStep{}, err
	}
	st := txStep{n: n, expected: n * len(ref)}
	for _, r := range results {
		st.done = append(st.done, r.done...)
		st.lags = append(st.lags, r.lags...)
		st.errEvs += r.errEvs + r.noStop
		st.failed += r.failed
		st.wrong += wrongTranscripts(r.transcripts, ref)
		st.missing += max(0, len(ref)-len(r.transcripts)-r.failed)
	}
	return st, nil
}

// wrongTranscripts counts the transcripts that differ from ref at their position, plus those
// beyond it (an utterance split in two); missing ones are not wrong, they are missing.
func wrongTranscripts(got, ref []string) int {
	wrong := max(0, len(got)-len(ref))
	for i := range min(len(got), len(ref)) {
		if got[i] != ref[i] {
			wrong++
		}
	}
	return wrong
}

func maxOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return slices.Max(xs)
}

// txFigures are the ramp's figures: the verdict, then per step its latency, append lag,
// wrong transcripts and errors.
func txFigures(steps []txStep, best, utterances int) []bench.Figure {
	figs := []bench.Figure{bench.One("rt_tx_sessions_realtime", "sessions", fmt.Sprintf(
		"largest step of concurrent transcription sessions (?intent=transcription, server_vad, %d utterances of the speech + 1.5 s silence each, "+
			"paced at real time in 100 ms appends) that keeps up: every item completed with the reference transcript within %d ms of its speech end, "+
			"every append within %d ms of the audio clock, no error event, .failed or missing item", utterances, txMaxDone.Milliseconds(), txMaxLag.Milliseconds()),
		float64(best), 0)}
	for _, st := range steps {
		figs = append(figs,
			bench.Figure{Name: fmt.Sprintf("rt_tx_done_ms_n%d", st.n), Unit: "ms", Samples: st.done, Keys: []bench.Stat{bench.P50, bench.P90}, Digits: 1,
				Definition: fmt.Sprintf("%d transcription sessions at once: speech end (the audio clock at speech_stopped's audio_end_ms less the %d ms silence window) → conversation.item.input_audio_transcription.completed received, per item", st.n, txSilenceMs)},
			bench.Figure{Name: fmt.Sprintf("rt_tx_append_lag_ms_n%d", st.n), Unit: "ms", Samples: st.lags, Keys: []bench.Stat{bench.Max}, Digits: 1,
				Definition: fmt.Sprintf("%d transcription sessions at once: input_audio_buffer.append written − the audio clock at its last sample (it is sent when its 100 ms have been spoken, as from a microphone), per append (key: the worst)", st.n)},
			bench.One(fmt.Sprintf("rt_tx_wrong_n%d", st.n), "items", fmt.Sprintf(
				"%d transcription sessions at once: items whose transcript differs from the reference session's (the same stream as a burst, one session) at its position, plus extra items", st.n),
				float64(st.wrong), 0),
			bench.One(fmt.Sprintf("rt_tx_errors_n%d", st.n), "items", fmt.Sprintf(
				"%d transcription sessions at once: error events + .failed items + items never completed (within %v after the stream) + completed items without a speech_stopped, of %d expected", st.n, txWait, st.expected),
				float64(st.errors()), 0))
	}
	return figs
}
