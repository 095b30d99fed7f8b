package stage

import (
	"context"
	"errors"
	"github.com/omniserve/omniserve/internal/duplex"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/speech"
)

// ear is the listening side of a duplex stream: the VAD, the ASR stream and what it was fed,
// a short history of recent audio (so that the ASR also hears the prefix padding before a
// detected onset), the open utterance's partial transcript, and semantic_vad's undecided pause.
// It decides nothing about the conversation: the stream (duplex_audio.go) asks it what it heard
// and hands endpoints to the conversation.
//
// Everything in it is guarded by its lock (lock/unlock), which serializes the audio calls.
type ear struct {
	// mu serializes the audio path; a channel so waiters give up on their ctx.
	mu  chan struct{}
	vad voiceDetector
	asr asrStream
	log *zap.Logger

	hist    []float32 // the most recent samples, at most 2*histCap
	histCap int
	pos     int64 // samples received so far (stream time)
	fed     int64 // samples up to which the ASR has been fed
	inSeg   bool  // VAD-gated feeding: inside a speech segment
	// cutSeg: a discard closed the ear's segment while the VAD's goes on; the audio after the
	// discard is fed at the VAD's end of it (speechStopped) or at a commit (closeUtterance), so
	// speech that follows the dropped audio without a pause is still heard.
	cutSeg bool
	asrHas bool // the ASR's open utterance has audio
	closed bool
	// silenceMs is the VAD's silence_duration_ms: a stop is reported that long after the speech
	// ended.
	silenceMs int
	// preemptedAt is the speech end (VAD ms) of the pause a speculation was last tried on.
	preemptedAt int64
	// The open utterance's transcript deltas (TranscriptDeltas): the words sent, and the
	// previous partial hypothesis.
	deltaSent, partialPrev string
	// logprobs: final transcripts carry each word's log posterior (TranscriptLogprobs); only
	// set on a recognizer that has them.
	logprobs bool

	// semantic_vad endpointing (duplex_semvad.go), fixed at open; sem is the undecided pause.
	semOn, semAsk bool
	semRule       duplex.SemanticEndpointing
	sem           *semPause
}

// voiceDetector is the VAD an ear runs (*speech.VAD; a scripted one in tests).
type voiceDetector interface {
	Process(pcm []float32) ([]speech.VADEvent, error)
	TrailingSilence() (silentMs int, speechEndMs int64)
	Close()
}

// partialASR is an asrStream that can tell its hypothesis of the open utterance.
type partialASR interface{ Partial() string }

// heard is what the ear holds of the open utterance at an endpoint.
type heard int

const (
	heardNothing heard = iota // nothing since the last commit or discard
	heardLocal                // audio the local recognizer decoded as it came
	heardRemote               // audio a remote ASR transcribes once cut (asrCutter)
)

func newEar(vad voiceDetector, asr asrStream, historyMs, silenceMs int, log *zap.Logger) *ear {
	capSamples := historyMs * audio.ASRSampleRate / 1000
	return &ear{
		mu: make(chan struct{}, 1), vad: vad, asr: asr, log: log, histCap: capSamples,
		hist: make([]float32, 0, 2*capSamples), preemptedAt: -1, silenceMs: silenceMs,
	}
}

// lock takes the audio lock; it fails with ErrClosed once the ear is closed.
func (e *ear) lock(ctx context.Context) error {
	select {
	case e.mu <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if e.closed {
		<-e.mu
		return ErrClosed
	}
	return nil
}

// hold takes the audio lock whatever the ctx or the ear's state (Close).
func (e *ear) hold() { e.mu <- struct{}{} }

func (e *ear) unlock() { <-e.mu }

func (e *ear) close() {
	if e.closed {
		return
	}
	e.closed = true
	e.asr.Close()
	e.vad.Close()
}

// record appends samples to the history, keeping at least histCap of them.
func (e *ear) record(pcm []float32) {
	if len(pcm) >= e.histCap {
		e.hist = append(e.hist[:0], pcm[len(pcm)-e.histCap:]...)
	} else {
		if len(e.hist)+len(pcm) > cap(e.hist) {
			keep := e.hist[len(e.hist)-(e.histCap-len(pcm)):]
			e.hist = append(e.hist[:0], keep...) // copy within: keep starts after dst
		}
		e.hist = append(e.hist, pcm...)
	}
	e.pos += int64(len(pcm))
}

// feedTo writes samples [fed, end) to the ASR. Samples before e.pos come from the history;
// chunk is the unit being appended (stream positions e.pos onward, not recorded yet), so a unit
// longer than the history still reaches the ASR whole. Only history samples older than
// audio_history_ms can be skipped (an onset placed before what the history still holds).
func (e *ear) feedTo(end int64, chunk []float32) error {
	histStart := e.pos - int64(len(e.hist))
	from := max(e.fed, histStart)
	end = min(end, e.pos+int64(len(chunk)))
	if end <= from {
		return nil
	}
	if from < e.pos {
		upto := min(end, e.pos)
		if err := e.asr.Write(e.hist[from-histStart : upto-histStart]); err != nil {
			return err
		}
		from = upto
	}
	if from < end {
		if err := e.asr.Write(chunk[from-e.pos : end-e.pos]); err != nil {
			return err
		}
	}
	e.fed = end
	e.asrHas = true
	return nil
}

// unitEnd is the stream position (in samples) at the end of unit, the audio being appended.
func (e *ear) unitEnd(unit []float32) int64 { return e.pos + int64(len(unit)) }

func sampleAt(ms int64) int64 { return ms * audio.ASRSampleRate / 1000 }

// speechStarted opens a VAD segment whose speech began at atMs: the ASR is fed from there (the
// history holds the prefix padding). A semantic_vad pause that had not ended the turn is over:
// the same turn goes on.
func (e *ear) speechStarted(atMs int64) {
	e.fed, e.inSeg, e.cutSeg = max(e.fed, sampleAt(atMs)), true, false
	e.sem = nil
}

// speechStopped closes the VAD segment whose speech ended at atMs. The stop is reported
// silence_duration_ms after the speech ended; the ASR already heard up to there while in the
// segment. pause reports that semantic_vad decides this endpoint later (beginPause), not now.
func (e *ear) speechStopped(atMs int64, unit []float32) (pause bool, err error) {
	if err := e.feedTo(sampleAt(atMs+int64(e.silenceMs)), unit); err != nil {
		return false, err
	}
	e.inSeg, e.cutSeg = false, false
	return e.semOn && e.asrHas, nil
}

// pending says what the open utterance holds for an endpoint.
func (e *ear) pending() heard {
	if !e.asrHas {
		return heardNothing
	}
	if _, ok := e.asr.(asrCutter); ok {
		return heardRemote
	}
	return heardLocal
}

// finish ends the ASR utterance and returns its transcript, with each word's log posterior
// when e.logprobs asks for them and keep is set (a discard keeps nothing, so it does not pay
// for the lattice passes).
func (e *ear) finish(keep bool) (duplex.Transcription, error) {
	e.asrHas = false
	e.deltaSent, e.partialPrev = "", ""
	var tr duplex.Transcription
	var err error
	if lf, ok := e.asr.(logprobFinisher); ok && keep && e.logprobs {
		tr.Text, tr.Logprobs, err = lf.FinishLogprobs()
		if tr.Logprobs == nil {
			tr.Logprobs = []audio.WordLogprob{} // asked for: an empty transcript has an empty list
		}
	} else {
		tr.Text, err = e.asr.Finish()
	}
	if c, ok := e.asr.(interface{ UtteranceCPU() time.Duration }); ok {
		tr.RecognizerCPU = c.UtteranceCPU()
	}
	return tr, err
}

// cut takes the open utterance's audio from a remote ASR for its transcription (asrCutter).
func (e *ear) cut() (transcribe func(ctx context.Context) (string, error), err error) {
	c, _ := e.asr.(asrCutter)
	transcribe, err = c.Cut()
	e.asrHas = false
	return transcribe, err
}

// closeUtterance readies the open utterance for a commit by hand: an open segment's audio so
// far is fed, and a semantic_vad pause has nothing left to decide.
func (e *ear) closeUtterance() error {
	e.sem = nil
	if !e.inSeg && !e.cutSeg {
		return nil
	}
	return e.feedTo(e.pos, nil)
}

// closeSegment closes an open segment, and a semantic_vad pause, so that their endpoint
// answers nothing: the audio so far is not fed (DiscardAudio); what the VAD's segment still
// brings after it is (cutSeg).
func (e *ear) closeSegment() {
	e.cutSeg = e.cutSeg || e.inSeg
	e.fed, e.inSeg, e.sem = e.pos, false, nil
}

// discard ends the ASR's open utterance and drops its hypothesis (DiscardAudio).
func (e *ear) discard() error {
	if !e.asrHas {
		return nil
	}
	if c, ok := e.asr.(asrCutter); ok {
		// Dropped without a transcription: nobody wants its text.
		_, _ = c.Cut()
		e.asrHas = false
		e.deltaSent, e.partialPrev = "", ""
		return nil
	}
	if _, err := e.finish(false); err != nil && !errors.Is(err, audio.ErrEmptyAudio) {
		return err
	}
	return nil
}

// settledDelta is the words of the open utterance newly settled since the last call ("" when
// none, or when the recognizer cannot tell a partial hypothesis).
func (e *ear) settledDelta() string {
	pa, ok := e.asr.(partialASR)
	if !ok || !e.asrHas {
		return ""
	}
	p := pa.Partial()
	if p == e.partialPrev {
		return ""
	}
	d := audio.StableDelta(e.deltaSent, e.partialPrev, p, false)
	e.partialPrev = p
	e.deltaSent += d
	return d
}

// partial is the ASR's hypothesis of the open utterance ("" when it has no audio); ok is false
// when the recognizer cannot tell one.
func (e *ear) partial() (text string, ok bool) {
	pa, ok := e.asr.(partialASR)
	if ok && e.asrHas {
		text = pa.Partial()
	}
	return text, ok
}

// hasPartial reports a recognizer that can tell its hypothesis before the utterance ends.
func (e *ear) hasPartial() bool {
	_, ok := e.asr.(partialASR)
	return ok
}

// speculationPoint is the hypothesis to speculate on when the open segment's trailing silence
// (silentMs, after speech that ended at endMs) reached preemptMs in a pause not tried yet; ""
// when not. One try per pause.
func (e *ear) speculationPoint(preemptMs, silentMs int, endMs int64) string {
	if silentMs < preemptMs || endMs == e.preemptedAt {
		return ""
	}
	e.preemptedAt = endMs
	return e.asr.(partialASR).Partial()
}
