package openai

import (
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// Encode is the server event of effect e in the OpenAI Realtime dialect, GA-shaped
// (protocol.Encode spells it beta for beta clients). ok is false for an effect the dialect has
// no event for.
//
// Each group of effects has its encoder, and every effect belongs to exactly one group, so the
// order only decides how many an effect is tried against: a response's deltas (its audio and
// transcript: two per 100 ms frame, most of a session's events) go straight to their encoder,
// the rest of its output is tried first, the session's own effects (a few per session) last.
func Encode(e session.Effect) (ev protocol.ServerEvent, ok bool) {
	if d, delta := e.(session.OutputDelta); delta {
		return outputDelta(d), true
	}
	if ev, ok = encodeOutput(e); ok {
		return ev, true
	}
	if ev, ok = encodeResponse(e); ok {
		return ev, true
	}
	if ev, ok = encodeInput(e); ok {
		return ev, true
	}
	if ev, ok = encodeConversation(e); ok {
		return ev, true
	}
	if ev, ok = encodeTools(e); ok {
		return ev, true
	}
	return encodeSession(e)
}

// encodeSession: the session's own effects, and errors.
func encodeSession(e session.Effect) (protocol.ServerEvent, bool) {
	if ev, ok := EncodeSession(e); ok {
		return ev, true
	}
	switch e := e.(type) {
	case session.Error:
		return protocol.NewErrorEvent(e.Type, e.Code, e.Message, e.EventID, e.Param), true
	case session.SessionClosing:
		return protocol.SessionClosing{SessionID: e.SessionID, Reason: e.Reason, GraceMs: e.GraceMs}, true
	case session.SessionClosed:
		return protocol.SessionClosed{SessionID: e.SessionID, Reason: e.Reason}, true
	case session.SessionResumed:
		return sessionResumed(e), true
	case session.HeartbeatAck:
		return protocol.SessionHeartbeatAck{SessionID: e.SessionID}, true
	}
	return nil, false
}

// sessionResumed is session.resumed without the event numbers, which the connection fills in.
func sessionResumed(e session.SessionResumed) protocol.SessionResumed {
	ev := protocol.SessionResumed{SessionID: e.SessionID, ResumeToken: e.ResumeToken, ResyncRequired: e.ResyncRequired}
	if obj, ok := Encode(e.Session); ok {
		if u, ok := obj.(protocol.SessionUpdated); ok {
			ev.Session = u.Session
		}
	}
	if e.Items != nil {
		items := Items(*e.Items)
		ev.Items = &items
	}
	if e.Response != nil {
		r := response(*e.Response)
		ev.Response = &r
	}
	return ev
}

// encodeTools: tool calls' arguments, MCP calls and listings.
func encodeTools(e session.Effect) (protocol.ServerEvent, bool) {
	switch e := e.(type) {
	case session.CallArguments:
		return callArguments(e), true
	case session.MCPCall:
		switch e.Phase {
		case session.PhaseInProgress:
			return protocol.ResponseMCPCallInProgress{OutputIndex: e.OutputIndex, ItemID: e.ItemID}, true
		case session.PhaseCompleted:
			return protocol.ResponseMCPCallCompleted{OutputIndex: e.OutputIndex, ItemID: e.ItemID}, true
		}
		return protocol.ResponseMCPCallFailed{OutputIndex: e.OutputIndex, ItemID: e.ItemID}, true
	case session.MCPListTools:
		switch e.Phase {
		case session.PhaseInProgress:
			return protocol.MCPListToolsInProgress{ItemID: e.ItemID}, true
		case session.PhaseCompleted:
			return protocol.MCPListToolsCompleted{ItemID: e.ItemID}, true
		}
		return protocol.MCPListToolsFailed{ItemID: e.ItemID}, true
	}
	return nil, false
}

func callArguments(e session.CallArguments) protocol.ServerEvent {
	switch {
	case e.MCP && e.Phase == session.PhaseDelta:
		return protocol.ResponseMCPCallArgumentsDelta{ResponseID: e.ResponseID, ItemID: e.ItemID, OutputIndex: e.OutputIndex, Delta: e.Text}
	case e.MCP:
		return protocol.ResponseMCPCallArgumentsDone{ResponseID: e.ResponseID, ItemID: e.ItemID, OutputIndex: e.OutputIndex, Arguments: e.Text}
	case e.Phase == session.PhaseDelta:
		return protocol.ResponseFunctionCallArgumentsDelta{ResponseID: e.ResponseID, ItemID: e.ItemID, OutputIndex: e.OutputIndex,
			CallID: e.CallID, Delta: e.Text}
	}
	return protocol.ResponseFunctionCallArgumentsDone{ResponseID: e.ResponseID, ItemID: e.ItemID, OutputIndex: e.OutputIndex,
		CallID: e.CallID, Arguments: e.Text, Name: e.Name}
}
