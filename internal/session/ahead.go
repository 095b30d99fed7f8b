package session

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// Decode-ahead on a session's first turn. The engine stream (and with it the ASR) used to open
// at the first commit, so the first turn's ASR decoded the whole utterance after the user had
// finished (≈ 390 ms of the first turn's commit → audible on 2 cores, issue #13). Now a manual
// turn's first append opens the stream and engineLink.forward streams the buffer into it while the
// user speaks; the commit pays only the final hypothesis, as on every later turn.
//
// The settings a stream is opened with (instructions, output modalities, max tokens,
// temperature) were frozen at the first commit before; a session.update between the first
// append and the first commit must still apply. While the early stream holds nothing but
// uncommitted audio (engineFresh), such an update closes it and opens a new one with the new
// settings, and the buffered audio — the session keeps every chunk until its commit — is
// forwarded again: nothing the user said is lost, and the conversation the model sees is the
// one the lazy open would have built.

// openOptions is what the engine stream is opened with under the configuration st, with the
// server's history budget maxHistoryBytes.
func openOptions(st *settings, maxHistoryBytes int) duplex.Options {
	td := st.cfg.TurnDetection
	if td == nil {
		td = st.cfg.defaultTurnDetection()
	}
	return duplex.Options{
		Instructions: st.cfg.Instructions, AutoResponse: st.autoResponse(), WantAudio: st.cfg.WantAudio(),
		MaxTokens: st.cfg.MaxOutputTokens, Temperature: st.cfg.Temperature, Seed: st.cfg.Seed,
		MaxHistoryBytes:    maxHistoryBytes,
		Truncation:         st.cfg.Truncation,
		Turn:               td.TurnDetection,
		TranscriptDeltas:   st.wantsDeltas(),
		TranscriptLogprobs: st.wantsLogprobs(),
		TranscribeOnly:     st.opts.Transcription,
		Dialect:            st.opts.Dialect,
	}
}

// sameStreamSettings reports whether a stream opened with a serves b. The engine's own VAD
// only endpoints auto-response turns; on manual turns its settings do not matter.
// TranscriptLogprobs is set on the open stream (transcriber.syncLogprobs).
func sameStreamSettings(a, b duplex.Options) bool {
	if a.Instructions != b.Instructions || a.AutoResponse != b.AutoResponse || a.WantAudio != b.WantAudio ||
		a.MaxTokens != b.MaxTokens || (a.Temperature == nil) != (b.Temperature == nil) ||
		(a.Temperature != nil && *a.Temperature != *b.Temperature) ||
		(a.Seed == nil) != (b.Seed == nil) || (a.Seed != nil && *a.Seed != *b.Seed) ||
		a.TranscriptDeltas != b.TranscriptDeltas {
		return false
	}
	return !a.AutoResponse || a.Turn == b.Turn
}

// ahead opens the engine stream (with opts, under fence, its outputs to deliver) at the first
// append of a manual turn, so that the ASR decodes while the user speaks; it reports whether it
// opened one. It never reports an error: a stream that cannot open now (capacity, no backend
// b) is opened, and its failure reported, by the commit as before. Without discard the stream
// cannot forget a cleared buffer, so nothing is forwarded to it ahead of a commit
// (engineLink.forward): it is kept, it is the one the commit would open, but not fresh.
func (l *engineLink) ahead(b Backend, fence requestclient.Fence, opts duplex.Options, deliver func(duplex.Output)) bool {
	if l.engine != nil || b == nil {
		return false
	}
	eng, err := b.Open(l.ctx, fence, opts, deliver)
	if err != nil {
		l.obs.log.Debug("opening the engine stream ahead of the commit; the commit retries", zap.Error(err))
		return false
	}
	_, discards := eng.(AudioDiscarder)
	l.opened(eng, opts, discards)
	return true
}

// stale reports whether a session.update must reopen the stream opened ahead of the first
// commit: it still holds nothing but uncommitted audio (fresh), the session is not busy (a
// response, an engine job), and the settings it was opened with no longer match opts, the new
// ones. The session then closes it (closeStale), routes what it queued, forgets it (forget) and
// opens a new one with the new settings, forwarding the buffered input again (handleUpdate).
func (l *engineLink) stale(opts duplex.Options, busy bool) bool {
	return l.engine != nil && l.fresh && !busy && !sameStreamSettings(l.opts, opts)
}

// closeStale closes the stale stream (stale); it returns after the stream's last output.
func (l *engineLink) closeStale() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.engine.Close(ctx, ""); err != nil {
		l.obs.log.Debug("closing the early engine stream", zap.Error(err))
	}
}

// forget forgets the closed stale stream and what was forwarded to it from in: the next
// append (or the reopening) opens the new one.
func (l *engineLink) forget(in *inputAudio) {
	l.engine, l.fresh, in.inputFwd, l.aheadListens = nil, false, 0, 0
}
