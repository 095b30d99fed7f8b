package session

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
)

// A transcription session (?intent=transcription; OpenAI's "realtime transcription") is a
// session whose committed audio is transcribed and never answered: the same input path (format
// decoding, noise reduction, VAD, the buffer, commit) and the same engine ASR as a conversation,
// with no response.* ever. Its session object is realtime.transcription_session; beta clients
// get transcription_session.created / .updated.

// transcriber is the session's input transcription as the actor runs it: the live deltas
// and utterance ends (transcripts), the events they make (deltas, failed), and a transcription
// session's item records. It runs on the actor only; it reaches the rest of the session through
// the narrow fields below, never through the Session.
type transcriber struct {
	transcripts

	// transcriptionSession: the session is a transcription session (Options.Transcription).
	transcriptionSession bool
	sessionID            string
	// send sends an effect at the session's current epoch.
	send func(Effect)
	// submit queues an engine job in wire order; false when the queue is full.
	submit   func(job) bool
	settings txSettings
	items    txItems
	wall     func() float64 // the statistics clock
	log      *zap.Logger
	metrics  transcriptionMetrics // nil: items are not observed
	// logStats, structured: --log-stats logs each item's record, as a table or (structured)
	// as JSON.
	logStats, structured bool
}

// txSettings is what transcriber reads of the configuration in force (*settings).
type txSettings interface {
	sendsTranscripts() bool
	wantsLogprobs() bool
	vadCommits() bool
	inputTranscription() bool
}

// txItems is what transcriber reads of the conversation (*conversation).
type txItems interface {
	find(id string) *item
	freshID(want string) string
}

// inputTranscription reports whether a conversation's input transcription is on (a
// transcription session's is: sendsTranscripts).
func (c *settings) inputTranscription() bool { return c.cfg.Transcription }

// vadCommits reports whether the server VAD commits the input (turn_detection is set).
func (c *settings) vadCommits() bool { return c.cfg.TurnDetection != nil }

// refuse answers a client event that only a conversation has; it reports whether it did.
func (t *transcriber) refuse(eventID, kind string) bool {
	if !t.transcriptionSession {
		return false
	}
	const code = "invalid_value"
	t.send(Error{Type: ErrorType(code), Code: code, EventID: eventID, Param: "type", Message: fmt.Sprintf("%s is not accepted in a transcription session: it transcribes committed audio and never responds (connect without ?intent=transcription for a conversation).", kind)})
	return true
}

// syncLogprobs makes the open engine stream's logprobs setting (streamOn) follow the
// session's, as a job: in wire order with the commits before and after the session.update, so
// an item carries logprobs exactly when the include in force at its commit asked. It returns
// the stream's setting once the job is queued (eng nil: no stream, nothing to change).
func (t *transcriber) syncLogprobs(eng Engine, streamOn bool) bool {
	on := t.settings.wantsLogprobs()
	if eng == nil || streamOn == on {
		return streamOn
	}
	setter, ok := eng.(transcriptLogprobSetter)
	if !ok {
		return streamOn
	}
	if !t.submit(job{run: func(ctx context.Context) jobResult {
		return jobResult{err: setter.SetTranscriptLogprobs(ctx, on), errCode: "runtime_append_failed"}
	}}) {
		t.log.Warn("transcript logprobs setting not queued: the engine queue is full", zap.Bool("on", on))
		return streamOn
	}
	return on
}

// transcriptLogprobsError refuses include logprobs where the recognizer has none (a remote
// ASR answers with text only): an error with its param, not completed events without them.
func transcriptLogprobsError(b Backend, next Config) *FieldError {
	if !next.TranscriptLogprobs {
		return nil
	}
	if b, ok := b.(transcriptLogprobBackend); ok && b.SupportsTranscriptLogprobs() {
		return nil
	}
	return &FieldError{"unsupported_value", "session.include",
		"item.input_audio_transcription.logprobs needs the local speech recognizer; this server's ASR gives no log probabilities."}
}

// committed takes a user audio item just committed: a transcription session records it from
// here (transcripts.opened).
func (t *transcriber) committed(itemID string) {
	if t.transcriptionSession {
		t.opened(itemID)
	}
}

// completed records the user audio item's transcript tr and, with input transcription on,
// sends conversation.item.input_audio_transcription.completed, with its words' logprobs while
// include asks for them and the engine gave them. The item itself was added and done at its
// commit (its transcript was null then, as OpenAI sends it).
func (t *transcriber) completed(itemID string, tr duplex.Transcription) {
	text := tr.Text
	it := t.items.find(itemID)
	if it != nil {
		it.Transcript = text
	}
	// Late deltas of the item are stale from here on, also when no transcript is sent.
	t.finishDeltas(itemID, text)
	if !t.settings.inputTranscription() {
		return
	}
	done := Transcription{Phase: PhaseCompleted, ItemID: itemID, Text: text}
	if t.settings.wantsLogprobs() && tr.Logprobs != nil {
		toks := audio.TranscriptTokens(tr.Logprobs, true)
		done.Logprobs = &toks
	}
	if it != nil {
		secs := it.AudioMs / 1000
		done.AudioSeconds = &secs
	}
	t.send(done)
	t.record(itemID, it, metrics.ItemCompleted, "", tr.RecognizerCPU)
}

// streamed takes a transcript delta the engine streamed: words of the open utterance, or (empty)
// the mark of a discard the deltas have reached.
func (t *transcriber) streamed(text string, openItem *string) {
	if text == "" {
		t.reached("", false) // a discard's mark
		return
	}
	t.delta(text, openItem)
}

// jobFailed takes the failure (code, err) of an engine job that was to transcribe itemID (""
// for none): its deltas are over (streamDeltas: the stream sends them) and a transcription
// session tells the item failed.
func (t *transcriber) jobFailed(itemID, code string, err error, streamDeltas bool) {
	if itemID == "" {
		return
	}
	if t.tracks(streamDeltas) {
		t.reached(itemID, true)
	}
	if t.transcriptionSession {
		t.failed(itemID, code, fmt.Sprintf("engine: %v", err))
	}
}

// failed reports a committed item that could not be transcribed, and records it.
func (t *transcriber) failed(itemID, code, message string) {
	t.send(Transcription{Phase: PhaseFailed, ItemID: itemID,
		Error: &Error{Type: "transcription_error", Code: code, Message: message}})
	t.record(itemID, t.items.find(itemID), metrics.ItemFailed, code, 0)
}

// tracks reports whether the engine stream sends transcript deltas (streamDeltas: it was
// opened with them), so that the utterance ends are kept (transcripts.cuts). It follows the
// stream, not the current setting: a stream opened with deltas keeps sending them after
// transcription is turned off, and those must still find their item (to be dropped).
func (t *transcriber) tracks(streamDeltas bool) bool {
	return t.transcriptionSession || streamDeltas
}

// delta sends words the recognizer settled on while the user speaks, to the item they belong
// to (transcripts.ahead); with no utterance end ahead of them they are the open utterance's:
// the item speech_started announced (*openItem), or one reserved now in *openItem (the commit
// takes it, as it takes speech_started's). Conversation sessions send them only while input
// transcription is on (OpenAI sends none without it).
func (t *transcriber) delta(text string, openItem *string) {
	if !t.settings.sendsTranscripts() || text == "" {
		return
	}
	target, ahead := t.ahead()
	if ahead && target == "" {
		return // of audio input_audio_buffer.clear discarded
	}
	if !ahead {
		*openItem = t.items.freshID(*openItem)
		target = *openItem
	}
	if text = t.add(target, text); text != "" {
		t.send(Transcription{Phase: PhaseDelta, ItemID: target, Text: text})
		t.timeDelta(target)
	}
}

// endUtterance records an utterance end sent to the engine: the committed item's id, or "" for
// a discard (streamDeltas as for tracks).
func (t *transcriber) endUtterance(itemID string, streamDeltas bool) {
	if t.tracks(streamDeltas) {
		t.cut(itemID)
	}
}

// dropOpen forgets the open utterance's deltas (its audio was discarded) and clears *openItem,
// so the next utterance gets a new item id. In a transcription session the utterance,
// announced by speech_started or its deltas, is recorded as cancelled.
func (t *transcriber) dropOpen(openItem *string, streamDeltas bool) {
	if t.tracks(streamDeltas) && *openItem != "" && t.items.find(*openItem) == nil {
		t.record(*openItem, nil, metrics.ItemCancelled, reasonCleared, 0)
		t.drop(*openItem)
		*openItem = ""
	}
}

// reasonCleared is a cancelled item's reason when input_audio_buffer.clear dropped its audio.
const reasonCleared = "input_audio_buffer_cleared"

// cancelOpen records, as cancelled with the session's close reason, every item of a
// transcription session that the close cut short: committed items whose transcript never
// came, then the utterance speech_started (or its deltas) announced in *openItem but no commit
// took.
func (t *transcriber) cancelOpen(reason string, openItem *string) {
	if !t.transcriptionSession {
		return
	}
	for len(t.open) > 0 {
		id := t.open[0]
		t.record(id, t.items.find(id), metrics.ItemCancelled, reason, 0)
	}
	if *openItem != "" && t.items.find(*openItem) == nil {
		t.record(*openItem, nil, metrics.ItemCancelled, reason, 0)
		*openItem = ""
	}
}

// finishDeltas ends the item's deltas (transcripts.finish) and, while transcripts are sent,
// sends the rest of its final transcript as its last delta.
func (t *transcriber) finishDeltas(itemID, final string) {
	if rest := t.finish(itemID, final); rest != "" && t.settings.sendsTranscripts() {
		t.send(Transcription{Phase: PhaseDelta, ItemID: itemID, Text: rest})
		t.timeDelta(itemID)
	}
}

// timeDelta notes a delta sent for the item's statistics record (transcription sessions only:
// a conversation's items are recorded in its turns).
func (t *transcriber) timeDelta(itemID string) {
	if t.transcriptionSession {
		t.sent(itemID, t.wall())
	}
}

// transcriptionMetrics is implemented by metrics that record transcription session items
// (metrics.Collectors: omniserve_realtime_transcription_* families).
type transcriptionMetrics interface {
	ObserveTranscriptionItem(metrics.TranscriptionItem)
}

// record records a transcription session item that ended now (.completed or .failed was just
// sent, or it was cut short): one immutable metrics.TranscriptionItem, observed by Prometheus
// and, with --log-stats, logged as its table (or JSON record). it may be nil (an item the
// history trimmed, or a cancelled one never committed); code is the failure's code, or a
// cancelled item's reason; recognizer is the recognizer's CPU time on a completed item (0: not
// measured).
func (t *transcriber) record(itemID string, it *item, outcome, code string, recognizer time.Duration) {
	if !t.transcriptionSession {
		return
	}
	committed := t.closed(itemID)
	now := t.wall()
	times := t.timing(itemID)
	rec := metrics.TranscriptionItem{ItemID: itemID, SessionID: t.sessionID, Committed: now, Done: now,
		FirstDelta: times.first, Deltas: times.deltas, Outcome: outcome, Error: code,
		RecognizerMs: float64(recognizer) / float64(time.Millisecond)}
	if outcome == metrics.ItemCancelled {
		rec.Error, rec.Reason = "", code
		if !committed {
			rec.Committed = 0 // only spoken: no commit to measure from
		}
	}
	if it != nil {
		rec.AudioMs, rec.Transcript = it.AudioMs, it.Transcript
		if it.CommittedAt > 0 {
			rec.Committed = it.CommittedAt
		}
		// With turn detection on, the server VAD commits in the step that sends speech_stopped
		// (input.go), so the commit is the speech end. A client's own commit under VAD is rare
		// and counted so too.
		if t.settings.vadCommits() {
			rec.SpeechEnd = rec.Committed
		}
	}
	if outcome != metrics.ItemCompleted {
		rec.Transcript = ""
	}
	if t.metrics != nil {
		t.metrics.ObserveTranscriptionItem(rec)
	}
	if t.logStats {
		metrics.LogTranscriptionItem(t.log, rec, t.structured)
	}
}
