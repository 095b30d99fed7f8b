package openai

import (
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// encodeConversation: the conversation's items.
func encodeConversation(e session.Effect) (protocol.ServerEvent, bool) {
	switch e := e.(type) {
	case session.ConversationItem:
		switch e.Phase {
		case session.PhaseAdded:
			return protocol.ConversationItemAdded{PreviousItemID: e.PreviousItemID, Item: Item(e.Item)}, true
		case session.PhaseDone:
			return protocol.ConversationItemDone{PreviousItemID: e.PreviousItemID, Item: Item(e.Item)}, true
		}
		return protocol.ConversationItemRetrieved{Item: Item(e.Item)}, true
	case session.ItemDeleted:
		return protocol.ConversationItemDeleted{ItemID: e.ItemID, Reason: e.Reason}, true
	case session.ItemTruncated:
		return protocol.ConversationItemTruncated{ItemID: e.ItemID, ContentIndex: e.ContentIndex, AudioEndMs: e.AudioEndMs}, true
	}
	return nil, false
}

// encodeInput: the input audio buffer, overlap decisions and input transcription.
func encodeInput(e session.Effect) (protocol.ServerEvent, bool) {
	switch e := e.(type) {
	case session.InputSpeech:
		if e.Phase == session.PhaseStarted {
			return protocol.InputAudioBufferSpeechStarted{AudioStartMs: e.AudioMs, ItemID: e.ItemID}, true
		}
		return protocol.InputAudioBufferSpeechStopped{AudioEndMs: e.AudioMs, ItemID: e.ItemID, EndOfTurn: endOfTurn(e.EndOfTurn)}, true
	case session.InputCommitted:
		return protocol.InputAudioBufferCommitted{PreviousItemID: e.PreviousItemID, ItemID: e.ItemID}, true
	case session.InputCleared:
		return protocol.InputAudioBufferCleared{}, true
	case session.InputTimeout:
		return protocol.InputAudioBufferTimeoutTriggered{AudioStartMs: e.AudioStartMs, AudioEndMs: e.AudioEndMs, ItemID: e.ItemID}, true
	case session.OverlapDecision:
		return protocol.OverlapDecision{SessionID: e.SessionID, Epoch: e.Epoch, Policy: e.Policy, Action: e.Action, Reason: e.Reason}, true
	case session.Transcription:
		return transcription(e), true
	}
	return nil, false
}

func endOfTurn(e *session.EndOfTurn) *protocol.EndOfTurnInfo {
	if e == nil {
		return nil
	}
	return &protocol.EndOfTurnInfo{Probability: e.Probability, Reason: e.Reason, SilenceMs: e.SilenceMs}
}

func transcription(e session.Transcription) protocol.ServerEvent {
	switch e.Phase {
	case session.PhaseDelta:
		return protocol.TranscriptionDelta{ItemID: e.ItemID, Delta: e.Text}
	case session.PhaseFailed:
		ev := protocol.TranscriptionFailed{ItemID: e.ItemID}
		if err := e.Error; err != nil {
			ev.Error = protocol.TranscriptionError{Type: err.Type, Code: err.Code, Message: err.Message}
			if err.Param != "" {
				p := err.Param
				ev.Error.Param = &p
			}
		}
		return ev
	}
	done := protocol.TranscriptionCompleted{ItemID: e.ItemID, Transcript: e.Text}
	if e.Logprobs != nil {
		lps := make([]protocol.TranscriptLogprob, len(*e.Logprobs))
		for i, t := range *e.Logprobs {
			lps[i] = protocol.TranscriptLogprob(t)
		}
		done.Logprobs = &lps
	}
	if e.AudioSeconds != nil {
		done.Usage = &protocol.TranscriptionUsage{Type: "duration", Seconds: *e.AudioSeconds}
	}
	return done
}
