package openai

import (
	"encoding/base64"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// encodeResponse: a response's life around its output: started, done, its output item, the
// engine's decisions, playback and rate limits.
func encodeResponse(e session.Effect) (protocol.ServerEvent, bool) {
	switch e := e.(type) {
	case session.ResponseStarted:
		return protocol.ResponseCreated{ResponseID: e.Response.ID, Response: response(e.Response)}, true
	case session.ResponseDone:
		return protocol.ResponseDone{ResponseID: e.Response.ID, Response: response(e.Response)}, true
	case session.OutputItem:
		if e.Phase == session.PhaseAdded {
			return protocol.ResponseOutputItemAdded{ResponseID: e.ResponseID, OutputIndex: e.OutputIndex, Item: Item(e.Item)}, true
		}
		return protocol.ResponseOutputItemDone{ResponseID: e.ResponseID, OutputIndex: e.OutputIndex, Item: Item(e.Item)}, true
	case session.TurnDecision:
		return turnDecision(e), true
	case session.AudioBuffer:
		return audioBuffer(e), true
	case session.PlaybackAcknowledged:
		return protocol.PlaybackAcknowledged{ResponseID: e.ResponseID, ItemID: e.ItemID, PlayedMs: e.PlayedMs, SentMs: e.SentMs}, true
	case session.RateLimits:
		limits := make([]protocol.RateLimit, len(e.Limits))
		for i, l := range e.Limits {
			limits[i] = protocol.RateLimit{Name: l.Name, Limit: l.Limit, Remaining: l.Remaining, ResetSeconds: l.ResetSeconds}
		}
		return protocol.RateLimitsUpdated{RateLimits: limits}, true
	}
	return nil, false
}

// encodeOutput: a response's content parts and the ends of its deltas (the deltas themselves
// are outputDelta's, which Encode calls first).
func encodeOutput(e session.Effect) (protocol.ServerEvent, bool) {
	switch e := e.(type) {
	case session.ContentPart:
		if e.Phase == session.PhaseAdded {
			return protocol.ResponseContentPartAdded{ResponseID: e.ResponseID, ItemID: e.ItemID, Part: responsePart(e.Kind, e.Text)}, true
		}
		return protocol.ResponseContentPartDone{ResponseID: e.ResponseID, ItemID: e.ItemID, Part: responsePart(e.Kind, e.Text)}, true
	case session.OutputDone:
		switch e.Kind {
		case session.PartAudio:
			return protocol.ResponseOutputAudioDone{ResponseID: e.ResponseID, ItemID: e.ItemID}, true
		case session.PartTranscript:
			return protocol.ResponseOutputAudioTranscriptDone{ResponseID: e.ResponseID, ItemID: e.ItemID, Transcript: e.Text}, true
		}
		return protocol.ResponseOutputTextDone{ResponseID: e.ResponseID, ItemID: e.ItemID, Text: e.Text}, true
	}
	return nil, false
}

// responsePart is a response's content part of kind carrying text (its transcript for audio),
// as the response events spell it (audio / text in both dialects).
func responsePart(kind session.PartKind, text string) protocol.ContentPart {
	if kind == session.PartAudio {
		return protocol.AudioPart("audio", text)
	}
	return protocol.TextPart("text", text)
}

// outputDelta is a response's delta: audio, its transcript, or text.
func outputDelta(e session.OutputDelta) protocol.ServerEvent {
	switch e.Kind {
	case session.PartAudio:
		return protocol.ResponseOutputAudioDelta{ResponseID: e.ResponseID, ItemID: e.ItemID,
			Delta: base64.StdEncoding.EncodeToString(e.Audio), Format: e.Format.Type, SampleRateHz: e.Format.Rate,
			AudioDurationMs: e.DurationMs}
	case session.PartTranscript:
		return protocol.ResponseOutputAudioTranscriptDelta{ResponseID: e.ResponseID, ItemID: e.ItemID, Delta: e.Text}
	}
	return protocol.ResponseOutputTextDelta{ResponseID: e.ResponseID, ItemID: e.ItemID, Delta: e.Text}
}

func turnDecision(e session.TurnDecision) protocol.ServerEvent {
	if e.Speak {
		return protocol.ResponseSpeak{ResponseID: e.ResponseID, ItemID: e.ItemID,
			Metadata: protocol.SpeakMetadata{SessionID: e.SessionID, Epoch: e.Epoch, ModelSpeak: true}}
	}
	return protocol.ResponseListen{SessionID: e.SessionID, Epoch: e.Epoch, Turn: e.Turn,
		Response: protocol.ListenResponse{Object: "realtime.response", Status: "listening"}}
}

func audioBuffer(e session.AudioBuffer) protocol.ServerEvent {
	switch e.Phase {
	case session.PhaseStarted:
		return protocol.OutputAudioBufferStarted{ResponseID: e.ResponseID}
	case session.PhaseStopped:
		return protocol.OutputAudioBufferStopped{ResponseID: e.ResponseID}
	}
	ev := protocol.OutputAudioBufferCleared{ItemID: e.ItemID, AudioEndMs: e.AudioEndMs}
	if e.ResponseID != "" {
		id := e.ResponseID
		ev.ResponseID = &id
	}
	return ev
}

// response is the realtime.response object of r.
func response(r session.ResponseInfo) protocol.Response {
	o := protocol.Response{ID: r.ID, Object: "realtime.response", Status: r.Status,
		Output: Items(r.Output), ConversationID: r.ConversationID, Metadata: r.Metadata,
		MaxOutputTokens:  protocol.MaxTokens(r.MaxOutputTokens),
		Omniserve:        protocol.ResponseExtension{SessionID: r.SessionID, Epoch: r.Epoch, TurnID: r.TurnID, AudioSentMs: r.AudioSentMs},
		OutputModalities: outputModalities(r.Audio),
		Audio:            &protocol.ResponseAudio{Output: protocol.AudioOutput{Format: FormatSpec(r.Format), Voice: r.Voice}},
		Temperature:      r.Temperature,
	}
	if d := r.StatusDetails; d != nil {
		o.StatusDetails = &protocol.StatusDetails{Type: d.Type, Reason: d.Reason}
	}
	if u := r.Usage; u != nil {
		o.Usage = &protocol.Usage{
			TotalTokens: u.TotalTokens, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
			InputTokenDetails: protocol.InputTokenDetails{
				TextTokens: u.InputText, AudioTokens: u.InputAudio, CachedTokens: u.Cached,
				CachedTokensDetails: protocol.CachedTokenDetails{TextTokens: u.CachedText, AudioTokens: u.CachedAudio},
			},
			OutputTokenDetails: protocol.OutputTokenDetails{TextTokens: u.OutputText, AudioTokens: u.OutputAudio},
		}
	}
	return o
}

// outputModalities is the GA single-modality view: audio implies its transcript.
func outputModalities(audio bool) []string {
	if audio {
		return []string{"audio"}
	}
	return []string{"text"}
}

// FormatSpec is the GA audio format object of f.
func FormatSpec(f session.AudioFormat) protocol.FormatSpec {
	switch f.Type {
	case "g711_ulaw":
		return protocol.FormatSpec{Type: "audio/pcmu"}
	case "g711_alaw":
		return protocol.FormatSpec{Type: "audio/pcma"}
	case "pcm_f32le":
		return protocol.FormatSpec{Type: "audio/pcm_f32le", Rate: f.Rate}
	}
	return protocol.FormatSpec{Type: "audio/pcm", Rate: f.Rate}
}
