package metrics

import (
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// Transcription item outcomes (TranscriptionItem.Outcome).
const (
	ItemCompleted = "completed" // conversation.item.input_audio_transcription.completed went out
	ItemFailed    = "failed"    // .failed went out (TranscriptionItem.Error says why)
	// ItemCancelled: the item was cut short, neither .completed nor .failed went out: its audio
	// was committed, or its speech had started (speech_started or a delta named it), when the
	// session closed or input_audio_buffer.clear dropped it (TranscriptionItem.Reason says which).
	ItemCancelled = "cancelled"
)

// TranscriptionItem is one committed item of a transcription session (?intent=transcription),
// recorded once when the item ends and read by every observer (the --log-stats table or JSON
// record, Prometheus): the transcription session's counterpart of a turn's FinalizedRequest.
// Times are wall seconds of the statistics clock (the session manager's WallClock); docs/STATS.md
// (TranscriptionItemStats) says what each figure measures.
type TranscriptionItem struct {
	ItemID    string
	SessionID string
	// AudioMs is the committed audio's duration (the item's usage seconds × 1000).
	AudioMs float64
	// SpeechEnd is when the server VAD ended the utterance (it sends speech_stopped and commits
	// in the same step); 0 for a manual commit (input_audio_buffer.commit), which has no VAD end.
	SpeechEnd float64
	// Committed is the item's commit: the client's input_audio_buffer.commit or the VAD's; 0
	// for a cancelled item whose audio was never committed.
	Committed float64
	// FirstDelta is when the item's first transcript delta was sent; 0 = none (the final
	// transcript went out as the only delta, or the item failed first).
	FirstDelta float64
	// Done is when .completed or .failed was sent, or when a cancelled item was cut.
	Done float64
	// Deltas counts the delta events sent for the item, the last one (the rest of the final
	// transcript) included.
	Deltas int
	// RecognizerMs is the CPU time the local recognizer spent on the item's audio (decoding it
	// as it came, ending the utterance, the logprobs' passes when asked); 0 when not measured (a
	// remote ASR, a failed or cancelled item).
	RecognizerMs float64
	// Transcript is the final transcript ("" when failed).
	Transcript string
	// Outcome is ItemCompleted, ItemFailed or ItemCancelled; Error is the failure's code ("" for
	// the others); Reason is why a cancelled item was cut: the session's close reason
	// (client_close, disconnect, shutdown, ...) or input_audio_buffer_cleared.
	Outcome string
	Error   string
	Reason  string
}

// start is the item's speech end, or its commit when there is none (a manual commit).
func (r TranscriptionItem) start() float64 {
	if r.SpeechEnd > 0 {
		return r.SpeechEnd
	}
	return r.Committed
}

// SpeechEndToDoneMs is the headline figure: how long the user waited after they stopped
// speaking (the VAD's speech end; a manual commit's commit) for the final transcript (or the
// failure).
func (r TranscriptionItem) SpeechEndToDoneMs() float64 { return (r.Done - r.start()) * 1000 }

// CommitToDoneMs runs from the commit to .completed/.failed (the
// omniserve_realtime_transcription_latency_seconds figure).
func (r TranscriptionItem) CommitToDoneMs() float64 { return (r.Done - r.Committed) * 1000 }

// speechEndToFirstDeltaMs runs from the speech end (or commit) to the first delta; negative
// when the streaming recognizer's first words went out while the user was still speaking.
// ok is false when the item had no delta before its final transcript, or neither a speech end
// nor a commit (a cancelled item that was only spoken).
func (r TranscriptionItem) speechEndToFirstDeltaMs() (ms float64, ok bool) {
	if r.FirstDelta <= 0 || r.start() <= 0 {
		return 0, false
	}
	return (r.FirstDelta - r.start()) * 1000, true
}

// RecognizerRTF is the recognizer's real-time factor on the item: its CPU time over the audio's
// duration (below 1: faster than real time). ok is false when either is unknown.
func (r TranscriptionItem) RecognizerRTF() (rtf float64, ok bool) {
	if r.RecognizerMs <= 0 || r.AudioMs <= 0 {
		return 0, false
	}
	return r.RecognizerMs / r.AudioMs, true
}

// chars and Words count the final transcript (bytes, as len; whitespace-separated words).
func (r TranscriptionItem) chars() int { return len(r.Transcript) }

// words counts the final transcript's whitespace-separated words.
func (r TranscriptionItem) words() int { return len(strings.Fields(r.Transcript)) }

// rows are the table's rows; zero rows are dropped by renderKV, as in every table (a manual
// commit has no speech_end rows, an item without deltas no first-delta row).
func (r TranscriptionItem) rows() []kv {
	f := func(key string, v float64) kv { return kv{key: key, val: floatCell(v), num: v} }
	i := func(key string, v int) kv { return kv{key: key, val: intCell(int64(v)), num: float64(v)} }
	rows := []kv{f("audio_ms", r.AudioMs)}
	if r.SpeechEnd > 0 {
		rows = append(rows, f("speech_end_to_done_ms", r.SpeechEndToDoneMs()))
	}
	if r.Committed > 0 { // a cancelled item whose audio was never committed has no commit
		rows = append(rows, f("commit_to_done_ms", r.CommitToDoneMs()))
	}
	if ms, ok := r.speechEndToFirstDeltaMs(); ok {
		key := "commit_to_first_delta_ms"
		if r.SpeechEnd > 0 {
			key = "speech_end_to_first_delta_ms"
		}
		// A first delta exactly at the speech end is a figure, not an absent one.
		rows = append(rows, kv{key: key, val: cell{text: formatFloat(ms)}, num: ms})
	}
	rows = append(rows, i("deltas", r.Deltas), i("transcript_chars", r.chars()), i("transcript_words", r.words()))
	rows = append(rows, f("recognizer_ms", r.RecognizerMs))
	if rtf, ok := r.RecognizerRTF(); ok {
		rows = append(rows, kv{key: "recognizer_rtf", val: cell{text: strconv.FormatFloat(rtf, 'f', 4, 64)}, num: rtf})
	}
	return rows
}

// title is the table's title: the item, its session and the outcome.
func (r TranscriptionItem) title() string {
	var b strings.Builder
	b.WriteString("TranscriptionItemStats [item_id=" + r.ItemID + " session=" + r.SessionID)
	b.WriteString(" outcome=" + r.Outcome)
	if r.Error != "" {
		b.WriteString(" error=" + r.Error)
	}
	if r.Reason != "" {
		b.WriteString(" reason=" + r.Reason)
	}
	b.WriteString("]")
	return b.String()
}

// RenderTranscriptionItem is the item's --log-stats table, in the turn tables' format.
func RenderTranscriptionItem(r TranscriptionItem) string { return renderKV(r.title(), r.rows()) }

// LogTranscriptionItem logs the item once: its table (one entry whose message starts with "\n",
// as the turn tables), or with structured on (--log-format json) one record with message
// "TranscriptionItemStats", kind "transcription_item", item_id, outcome, error, reason and every
// row (zero rows included) as a number. The record leaves session_id to log: the session's logger
// already carries it, and a JSON object must not repeat a key.
func LogTranscriptionItem(log *zap.Logger, r TranscriptionItem, structured bool) {
	if log == nil {
		return
	}
	if !structured {
		log.Info("\n" + RenderTranscriptionItem(r))
		return
	}
	f := []zap.Field{zap.String("kind", "transcription_item"), zap.String("item_id", r.ItemID),
		zap.String("outcome", r.Outcome)}
	if r.Error != "" {
		f = append(f, zap.String("error", r.Error))
	}
	if r.Reason != "" {
		f = append(f, zap.String("reason", r.Reason))
	}
	for _, row := range r.rows() {
		f = append(f, zap.Float64(row.key, row.num))
	}
	log.Info("TranscriptionItemStats", f...)
}
