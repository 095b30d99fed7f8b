package session

import (
	"errors"
	"fmt"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/speech"
)

// The input audio's state and its primitives (decode and clean, listen, buffer, what may be
// forwarded). The input path's decisions over it (append, hearAppend, barge, keep: one
// input_audio_buffer.append from the wire to the engine) are in input_path.go; they return
// actions the shell runs (plan.go). inputAudio sends nothing, logs nothing and never calls the
// engine.

// inputAudio is the session's input audio up to the engine: the decoder (one resampler for
// the stream), noise reduction, the echo canceller, the overlap VAD with the timing of its
// onsets, the uncommitted buffer with the part of it already forwarded to the engine, and the
// input clock that audio_start_ms / audio_end_ms count. It sends nothing, logs nothing and never
// calls the engine: the session turns what its methods return into events and engine calls.
// The Session holds it as a field (s.inputAudio), never embedded.
type inputAudio struct {
	inDec   InputDecoder         // the append stream's decoder: one resampler for the session's input
	denoise *speech.Denoiser     // audio.input.noise_reduction; nil = off
	echo    *audio.EchoCanceller // removes the session's own sent audio from what the VAD hears
	inputMs float64              // input audio taken this session (audio_start_ms / audio_end_ms clock)

	// The uncommitted buffer.
	inputBuf   [][]float32
	inputBytes int
	// inputStartTS is the wall time of the first append after the last commit / clear: a
	// manual turn's statistics t0 (turn 1 too, whose stream may open only at the commit).
	inputStartTS float64
	// inputFwd is how many leading inputBuf chunks already went to the engine ahead of the
	// commit (decoded while the user speaks, engineLink.forward); the commit job feeds only the rest.
	inputFwd   int
	bufStartMs float64 // inputMs at the start of the uncommitted buffer

	// The overlap VAD (server_vad's, or auto_response's silent one).
	vad       *speech.VAD   // created on the first append that needs it
	vadTD     TurnDetection // the settings vad was created with
	vadBaseMs float64       // inputMs when the VAD's stream time was 0
	// vadMarks remembers when the last appends reached vad (stream ms at their end, wall time),
	// so a speech onset the VAD reports later is stamped with the receipt of its own append.
	vadMarks [16]vadMark
	vadFed   int64   // samples fed to vad since it was created or reset
	onsetAt  float64 // wall time of the onset reported by the last append; 0 = none
	// overlapMs is the speech heard over the active response, in the current segment (overlap).
	overlapMs float64
	// overlapSpeechMs is all the speech heard over the active response since the last commit,
	// every run of it: a commit's overlap tier (overlap_commit.go).
	overlapSpeechMs float64
	inSpeech        bool // speech_started went out and its speech_stopped has not
	// speechItemID is the item id announced by speech_started (or timeout_triggered, or a
	// transcription delta), which the next commit gives its user item.
	speechItemID string
}

// overlapMinSpeechMs is the voiced time the overlap VAD needs before it reports speech (eight
// 30 ms frames). WebRTC VAD (mode 2, the default threshold 0.5) takes loud white noise for speech
// and its hangover stretches a burst: measured over 300 seeds × 3 bursts at random frame
// alignment, 50 ms bursts gave voiced runs of 120–180 ms and 100 ms bursts 180–210 ms (150 ms
// bursts 240–300 ms). 240 ms rejects every burst up to 100 ms; speech.DefaultMinSpeechMs (150)
// let most 50 ms bursts through. The cost is barge-in latency: 240 ms of speech after its onset.
const overlapMinSpeechMs = 240

// overlapEarlySpeechMs is the voiced time that suffices when the run carries a voice's pitch
// (speech.VADConfig.EarlySpeechMs): white noise has none, and a tone burst of up to 100 ms
// cannot complete it, so the noise rejection above holds while real speech is confirmed
// 0–90 ms sooner (measured on four pocketsphinx clips; internal/speech TestVADEarlySpeech).
const overlapEarlySpeechMs = 150

// OverlapBargeInMs is how long speech overlapping a response must go on before an engine that
// owns the turns (auto_response) without interrupt_response (vllm-omni's listen_only) yields
// to it: vllm-omni's overlap_barge_in_ms. A remark shorter than that ("mm-hm", "right") is
// heard and answered after the reply; a substantial interruption cuts the reply, as a duplex
// model stops talking when it is talked over.
const OverlapBargeInMs = 1200

// Why an append barges in on the active response (OverlapDecision.Reason).
const (
	bargeSpeech    = "speech"           // interrupt_response: at the speech's onset
	bargeSustained = "sustained_speech" // the engine's turns: OverlapBargeInMs of overlapping speech
)

// bargeDecision is the overlap policy on an append heard as vr under h, overlapMs the speech
// that has overlapped the active response so far (overlap): heard is speech the VAD confirmed
// (the idle follow-up ends); cancel, when not "", says why it barges in on the active response.
func bargeDecision(vr vadResult, h hearing, overlapMs float64) (heard bool, cancel string) {
	switch {
	case !h.active:
	case vr.started && h.td != nil && h.td.InterruptResponse:
		cancel = bargeSpeech
	case h.auto && (h.td == nil || !h.td.InterruptResponse) && vr.voiced && overlapMs >= OverlapBargeInMs:
		cancel = bargeSustained
	}
	return vr.started, cancel
}

// overlap adds an append of ms heard as vr to the speech overlapping the active response and
// returns it: 0 when no response is active or the speech stopped (a new remark starts anew).
// The speech of every run since the last commit is summed too (overlapSpeechMs), while the
// response lasts.
func (in *inputAudio) overlap(vr vadResult, active bool, ms float64) float64 {
	if !active {
		in.overlapMs, in.overlapSpeechMs = 0, 0
		return 0
	}
	if !vr.voiced {
		in.overlapMs = 0
		return 0
	}
	in.overlapMs += ms
	in.overlapSpeechMs += ms
	return in.overlapMs
}

// resetVAD starts a response with a fresh detector, so only speech that begins during the
// response can barge in on it. A segment announced to the client is closed first: the VAD
// forgets it, and speech_started must not come twice without a speech_stopped between (the
// effect returned, at epoch).
func (in *inputAudio) resetVAD(epoch int) []Event {
	in.overlapSpeechMs = 0 // a new response: only speech over it counts
	if !in.restartVAD() {
		return nil
	}
	return []Event{{Epoch: epoch, Effect: InputSpeech{Phase: PhaseStopped, AudioMs: int(in.inputMs), ItemID: in.speechItemID}}}
}

// commitRefusal is the error effect of a commit of a buffer too small (under 100 ms), or nil.
func (in *inputAudio) commitRefusal(eventID string, epoch int) *Event {
	bufMs := in.bufferedMs()
	if len(in.inputBuf) > 0 && bufMs >= 100 {
		return nil
	}
	ev := errorEvent(epoch, "input_audio_buffer_commit_empty", fmt.Sprintf(
		"Error committing input audio buffer: buffer too small. Expected at least 100ms of audio, but buffer only has %.2fms of audio.", bufMs), eventID, "")
	return &ev
}

// takeSpeechID takes the id speech_started announced for the user item being spoken ("" if
// none): the item committed now gets it.
func (in *inputAudio) takeSpeechID() string {
	id := in.speechItemID
	in.speechItemID = ""
	return id
}

// msOf is the duration of n samples at EngineRate, in ms.
func msOf(n int) float64 { return float64(n) * 1000 / EngineRate }

// takeAppend decodes one append in its own format when the event names one (own), else in the
// session's (f), cleans it (noise reduction) and advances the input clock. The refusal says
// which field was bad; an empty append gives no samples and no error.
func (in *inputAudio) takeAppend(data []byte, f AudioFormat, own *AudioFormat) ([]float32, *FieldError) {
	if own != nil {
		nf, err := NormalizeInputFormat(*own)
		if err != nil {
			return nil, &FieldError{Code: "unsupported_audio_format", Param: "format", Message: err.Error()}
		}
		f = nf
	}
	var pcm []float32
	if f.Type == "pcm16" && f.Rate == EngineRate && len(data)%2 == 0 {
		// The default format is already the engine's: whole pcm16 samples need no resampler
		// and cannot be refused (the decoder words the refusal of an odd length).
		pcm, _ = audio.PCM16BytesToFloat32(nil, data)
	} else {
		var err error
		if pcm, err = in.inDec.Decode(data, f); err != nil {
			return nil, &FieldError{Code: "bad_audio", Param: "audio", Message: err.Error()}
		}
	}
	if len(pcm) == 0 {
		return nil, nil
	}
	if in.denoise != nil {
		in.denoise.ProcessFloat(pcm)
	}
	in.inputMs += msOf(len(pcm))
	return pcm, nil
}

// The input's noise reduction (audio.input.noise_reduction): a speex preprocessor over the
// decoded 16 kHz input (takeAppend), before the session VAD, the engine's VAD and the ASR, so all of
// them hear the same cleaned audio. It delays the input by one 20 ms frame.

// setNoiseReduction makes the denoiser match kind ("" = off): created when noise reduction is
// turned on, replaced when its type changes, closed when it is turned off.
func (in *inputAudio) setNoiseReduction(kind string) error {
	if in.denoise != nil && in.denoise.Kind() == kind {
		return nil
	}
	in.closeDenoise()
	if kind == "" {
		return nil
	}
	d, err := speech.NewDenoiser(kind, EngineRate)
	if err != nil {
		return fmt.Errorf("noise reduction %q: %w", kind, err)
	}
	in.denoise = d
	return nil
}

// closeDenoise frees the speex preprocessor (C memory); Run defers it.
func (in *inputAudio) closeDenoise() {
	if in.denoise != nil {
		in.denoise.Close()
		in.denoise = nil
	}
}

// buffer adds one taken append to the uncommitted buffer, unless the pending input would pass
// maxBytes (ok false: the append is refused). first reports the buffer's first chunk, whose
// receipt (now) is the turn's t0.
func (in *inputAudio) buffer(pcm []float32, maxBytes int, now float64) (first, ok bool) {
	if in.inputBytes+4*len(pcm) > maxBytes {
		return false, false
	}
	if len(in.inputBuf) == 0 {
		in.bufStartMs = in.inputMs - msOf(len(pcm))
		in.inputStartTS = now
	}
	in.inputBuf = append(in.inputBuf, pcm)
	in.inputBytes += 4 * len(pcm)
	return len(in.inputBuf) == 1, true
}

// bufferedMs is the audio the uncommitted buffer holds (0 when empty).
func (in *inputAudio) bufferedMs() float64 {
	if len(in.inputBuf) == 0 {
		return 0
	}
	return in.inputMs - in.bufStartMs
}

// takeBuffer empties the buffer for a commit: the chunks not yet forwarded to the engine, the
// buffer's first receipt and its length in ms.
func (in *inputAudio) takeBuffer() (rest [][]float32, startedAt, audioMs float64) {
	rest, startedAt, audioMs = in.inputBuf[in.inputFwd:], in.inputStartTS, in.inputMs-in.bufStartMs
	in.inputBuf, in.inputBytes, in.inputFwd, in.inputStartTS = nil, 0, 0, 0
	return rest, startedAt, audioMs
}

// clearBuffer drops the uncommitted buffer (input_audio_buffer.clear; the forwarded head is
// the session's to take back from the engine first).
func (in *inputAudio) clearBuffer() {
	in.inputBuf, in.inputBytes, in.inputStartTS = nil, 0, 0
}

// echoMaxDelayMs bounds the delay between sending audio and hearing it back in the input that
// the echo canceller searches: the client's playback buffer plus the room.
const echoMaxDelayMs = 400

// reference gives the echo canceller ref, a frame of the assistant's audio at 16 kHz (nil
// while no VAD listens: nothing to cancel).
func (in *inputAudio) reference(ref []float32) {
	if ref != nil {
		in.echoCanceller().Reference(ref)
	}
}

// echoCanceller returns the session's canceller, made on the first audio sent while a VAD
// listens (pure Go, no C memory).
func (in *inputAudio) echoCanceller() *audio.EchoCanceller {
	if in.echo == nil {
		in.echo = audio.NewEchoCanceller(echoMaxDelayMs)
	}
	return in.echo
}

// withoutEcho is what the VAD hears of pcm: the input without the echo of what the session
// itself sent, so a client without echo cancellation does not barge in on its own assistant.
// The canceller's clock advances with every append, whether a VAD runs or not (append
// advances it itself when none does).
func (in *inputAudio) withoutEcho(pcm []float32) []float32 {
	if in.echo == nil {
		return pcm
	}
	return in.echo.Process(pcm)
}

// echoReference converts a 24 kHz talker frame to 16 kHz (linear interpolation: the canceller
// correlates and subtracts, it does not need a band-limited resampler).
func echoReference(pcm []float32) []float32 {
	n := len(pcm) * EngineRate / OutputRate
	out := make([]float32, n)
	for i := range out {
		x := float64(i) * OutputRate / EngineRate
		j := int(x)
		frac := float32(x - float64(j))
		a := pcm[j]
		b := a
		if j+1 < len(pcm) {
			b = pcm[j+1]
		}
		out[i] = a + (b-a)*frac
	}
	return out
}

// speechArrival is the turn's t0 for an auto_response append heard as vr at now: the first
// speech, not server-side silence (silence appends before the user spoke would inflate
// e2e_total_ms), stamped with the speech onset's own append when this append confirmed it
// (docs/STATS.md). false: no speech, nothing to stamp.
func (in *inputAudio) speechArrival(vr vadResult, now float64) (float64, bool) {
	if !vr.voiced {
		return 0, false
	}
	if vr.started && in.onsetAt > 0 {
		return in.onsetAt, true
	}
	return now, true
}

// errNoOverlapVAD: the overlap VAD could not be created (only allocation can fail: config
// validation keeps its settings in range); the session goes on without barge-in on speech.
var errNoOverlapVAD = errors.New("no overlap vad")

// listen runs the overlap VAD over one taken append received at now, under the session's
// turn_detection td. Under server_vad or semantic_vad it returns the edges to announce (a
// started edge carries the user item's id in speechItemID); with td nil the VAD runs only for
// auto_response's t0, silently with the settings fallback, and not at all without
// auto_response. It hears the append without the echo of the session's own audio.
func (in *inputAudio) listen(pcm []float32, td, fallback *TurnDetection, autoResponse bool, now float64) (vadResult, []speechEdge, error) {
	heard := in.withoutEcho(pcm)
	announce := td != nil
	if td == nil {
		if !autoResponse {
			in.closeVAD()
			return vadResult{}, nil, nil
		}
		td = fallback
	}
	vt := *td
	vt.SilenceDurationMs = vadSilenceMs(td, autoResponse) // semantic_vad finds pauses with its minimum silence
	if err := in.ensureVAD(vt, len(pcm)); err != nil {
		return vadResult{}, nil, fmt.Errorf("%w: %w", errNoOverlapVAD, err)
	}
	res, edges, err := in.hear(heard, announce, semanticPauses(td, autoResponse) || engineEndsTurns(td, autoResponse), now)
	for _, e := range edges {
		if e.started && in.speechItemID == "" {
			in.speechItemID = newItemID()
		}
	}
	return res, edges, err
}

// vadResult is what one append did to the speech segmentation.
type vadResult struct {
	started bool // a segment opened in this append (speech_started)
	stopped bool // a segment closed in this append (speech_stopped)
	voiced  bool // speech anywhere in this append, or a segment still open
}

// speechEdge is a speech_started (started) or speech_stopped the client is to be told about,
// at its position in the session's input audio: audio_start_ms includes prefix_padding_ms,
// audio_end_ms the silence window, as OpenAI reports them.
type speechEdge struct {
	started bool
	atMs    int
	// semantic_vad (hear's pauses): pause is the end of speech (atMs, without the silence
	// window) that opens a pause, the segment still announced; resumed is speech in that pause.
	pause, resumed bool
}

// ensureVAD makes the VAD match td: created on first use, recreated when session.update
// changed its settings (the next segment uses the new ones). samples is the append about to
// be heard (the VAD's stream time starts at its first sample).
func (in *inputAudio) ensureVAD(td TurnDetection, samples int) error {
	if in.vad != nil && in.vadTD != td {
		in.closeVAD()
	}
	if in.vad != nil {
		return nil
	}
	v, err := speech.NewVAD(speech.VADConfig{
		SampleRate: EngineRate, Threshold: td.Threshold, PrefixPaddingMs: td.PrefixPaddingMs,
		SilenceDurationMs: td.SilenceDurationMs, MinSpeechMs: overlapMinSpeechMs,
		EarlySpeechMs: overlapEarlySpeechMs,
	})
	if err != nil {
		return fmt.Errorf("creating the overlap vad: %w", err)
	}
	in.vad, in.vadTD = v, td
	in.vadBaseMs = in.inputMs - msOf(samples)
	return nil
}

// hear runs the VAD (ensureVAD first) over one append as heard (withoutEcho), received at now.
// With announce (server_vad) it returns the speech_started / speech_stopped edges to send, in
// order; without (auto_response's silent VAD) only the result. started feeds the overlap
// decision (the VAD requires overlapMinSpeechMs of voiced frames, or overlapEarlySpeechMs of
// pitched ones, so a click, a noise burst or a short cough does not interrupt); voiced lets
// auto_response stamp the turn's t0. Call it after takeAppend counted the append.
// With pauses (semantic_vad) an announced segment's end is a pause edge that leaves the segment
// open (the session decides when the turn ends), and speech after it a resumed edge.
func (in *inputAudio) hear(pcm []float32, announce, pauses bool, now float64) (vadResult, []speechEdge, error) {
	evs, err := in.vad.Process(pcm)
	if err != nil {
		return vadResult{}, nil, fmt.Errorf("overlap vad: %w", err)
	}
	in.markVAD(len(pcm), in.vadTD.PrefixPaddingMs, evs, now)
	var res vadResult
	var edges []speechEdge
	for _, ev := range evs { // evs is reused by the next Process call: consumed here
		switch ev.Kind {
		case speech.SpeechStarted:
			res.voiced, res.started = true, true
			if announce && !in.inSpeech {
				in.inSpeech = true
				edges = append(edges, speechEdge{started: true, atMs: int(in.vadBaseMs) + int(ev.AtMs)})
			} else if pauses && in.inSpeech {
				edges = append(edges, speechEdge{resumed: true})
			}
		case speech.SpeechStopped:
			if in.inSpeech && pauses && announce {
				edges = append(edges, speechEdge{pause: true, atMs: int(in.vadBaseMs) + int(ev.AtMs)})
				continue
			}
			if in.inSpeech {
				in.inSpeech = false
				res.stopped = true
				end := min(in.vadBaseMs+float64(ev.AtMs)+float64(in.vadTD.SilenceDurationMs), in.inputMs)
				edges = append(edges, speechEdge{atMs: int(end)})
			}
		}
	}
	res.voiced = res.voiced || in.vad.InSpeech()
	return res, edges, nil
}

// vadMark is one append as the VAD saw it.
type vadMark struct {
	endMs int64
	at    float64
}

// markVAD records the append that was just processed and, when it completed a SpeechStarted,
// sets onsetAt to the receipt time of the append holding the onset (the VAD confirms speech
// only after min speech; the turn's t0 is the onset, as speech_started reports it).
func (in *inputAudio) markVAD(samples, prefixPaddingMs int, evs []speech.VADEvent, now float64) {
	in.vadFed += int64(samples)
	copy(in.vadMarks[:], in.vadMarks[1:])
	in.vadMarks[len(in.vadMarks)-1] = vadMark{endMs: in.vadFed * 1000 / EngineRate, at: now}
	in.onsetAt = 0
	for _, ev := range evs {
		if ev.Kind != speech.SpeechStarted {
			continue
		}
		onset := ev.AtMs + int64(prefixPaddingMs) // AtMs has the prefix padding taken off
		in.onsetAt = now
		for _, m := range in.vadMarks {
			if m.at > 0 && m.endMs > onset {
				in.onsetAt = m.at
				break
			}
		}
	}
}

// restartVAD gives the VAD a fresh start (a response begins: only speech that begins during
// it can barge in on it) and reports whether a segment announced to the client was open: the
// VAD forgets it, so the session closes it with speech_stopped.
func (in *inputAudio) restartVAD() (wasInSpeech bool) {
	if in.vad == nil {
		return false
	}
	wasInSpeech, in.inSpeech = in.inSpeech, false
	in.vad.Reset()
	in.vadMarks, in.vadFed, in.onsetAt = [16]vadMark{}, 0, 0
	in.vadBaseMs = in.inputMs
	return wasInSpeech
}

// closeVAD frees the WebRTC instance (C memory the GC does not see); Run defers it so every exit
// path releases it.
func (in *inputAudio) closeVAD() {
	if in.vad != nil {
		in.vad.Close()
		in.vad = nil
	}
	in.inSpeech = false
	in.vadMarks, in.vadFed, in.onsetAt = [16]vadMark{}, 0, 0
}
