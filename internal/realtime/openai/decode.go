package openai

import (
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// ResumeSession is session.resume, the first event of a connection that takes over a session
// after a disconnect (docs/REALTIME.md, "Resuming a session"). The connection handles it; it
// never reaches the session actor.
type ResumeSession struct {
	session.Base
	SessionID string
	Token     string
	// LastSeq is the client's last received server_event_seq (0: none).
	LastSeq int64
}

// EventAck is session.event_ack: the client received every server event up to Seq. The
// connection consumes it (its journal drops what was acked) and never answers it; Problem is
// why an ack is invalid ("" when valid), which the connection counts instead of answering.
type EventAck struct {
	session.Base
	Seq     int64
	Problem string
}

// Decode parses one client event (a text frame, GA or beta) into a session command, or the
// error event's error for a frame that is not a valid client event. The session's
// configuration types have the protocol's shape, so the mapping is conversion: each group of
// events (decoders) has its converter, and every client event belongs to exactly one group.
func Decode(data []byte) (session.Command, *protocol.Error) {
	ev, werr := protocol.DecodeClientEvent(data)
	if werr != nil {
		return nil, werr
	}
	base := session.Base{ID: ev.EventID(), Kind: ev.Type()}
	for _, convert := range decoders {
		if c := convert(base, ev); c != nil {
			return c, nil
		}
	}
	panic("openai: client event without a command: " + ev.Type()) // protocol and the converters list the same events
}

// decoders convert client events to session commands, one group each; a converter returns nil
// for an event outside its group. The groups are disjoint: the audio buffers' (appends, most of
// a session's events) are tried first.
var decoders = [...]func(session.Base, protocol.ClientEvent) session.Command{
	inputAudioCommand, responseCommand, itemCommand, sessionCommand,
}

// sessionCommand converts the events about the session itself: update, close, heartbeat,
// resume, and the acknowledgement of server events.
func sessionCommand(base session.Base, ev protocol.ClientEvent) session.Command {
	switch e := ev.(type) {
	case *protocol.SessionUpdate:
		return &session.UpdateSession{Base: base, Patch: ConfigPatch(e.Session), BetaSpelling: e.BetaSpelling, Transcription: e.Transcription}
	case *protocol.SessionClose:
		return &session.CloseSession{Base: base}
	case *protocol.SessionHeartbeat:
		return &session.Heartbeat{Base: base}
	case *protocol.SessionResume:
		return &ResumeSession{Base: base, SessionID: e.SessionID, Token: e.Token, LastSeq: e.LastSeq}
	case *protocol.SessionEventAck:
		return &EventAck{Base: base, Seq: e.Seq, Problem: e.Problem}
	}
	return nil
}

// inputAudioCommand converts the events about the audio buffers: the input buffer's append,
// commit, clear and cancel, the output buffer's clear, and barge-in.
func inputAudioCommand(base session.Base, ev protocol.ClientEvent) session.Command {
	switch e := ev.(type) {
	case *protocol.InputAudioBufferAppend:
		return &session.AppendAudio{Base: base, Data: e.Audio, Format: (*session.AudioFormat)(e.Format)}
	case *protocol.InputAudioBufferCommit:
		return &session.CommitInput{Base: base, ResponseCreate: e.ResponseCreate}
	case *protocol.InputAudioBufferClear:
		return &session.ClearInput{Base: base}
	case *protocol.OutputAudioBufferClear:
		return &session.ClearOutputAudio{Base: base, ResponseID: e.ResponseID}
	case *protocol.InputCancel:
		return &session.CancelInput{Base: base}
	case *protocol.BargeIn:
		return &session.BargeIn{Base: base}
	}
	return nil
}

// responseCommand converts the events about responses: create, cancel, and the playback
// acknowledgement of a response's audio.
func responseCommand(base session.Base, ev protocol.ClientEvent) session.Command {
	switch e := ev.(type) {
	case *protocol.ResponseCreate:
		return createResponse(base, e)
	case *protocol.ResponseCancel:
		return &session.CancelResponse{Base: base, ResponseID: e.ResponseID}
	case *protocol.PlaybackAck:
		return &session.PlaybackAck{Base: base, PlayedMs: e.PlayedMs, ResponseID: e.ResponseID, ItemID: e.ItemID, Truncate: e.Truncate}
	}
	return nil
}

// createResponse converts response.create.
func createResponse(base session.Base, e *protocol.ResponseCreate) *session.CreateResponse {
	c := &session.CreateResponse{Base: base, MaxOutputTokens: e.MaxOutputTokens, Modalities: e.Modalities,
		OutputFormat: (*session.AudioFormat)(e.OutputFormat), Metadata: e.Metadata, Instructions: e.Instructions,
		Conversation: e.Conversation, Unsupported: e.Unsupported,
		ToolsSet: e.ToolsSet, Tools: tools(e.Tools), ToolChoice: (*session.ToolChoice)(e.ToolChoice), ParallelToolCalls: e.ParallelToolCalls}
	if e.Input != nil {
		c.Input = make([]session.InputItem, len(e.Input))
		for i, it := range e.Input {
			c.Input[i] = session.InputItem(it)
		}
	}
	return c
}

// itemCommand converts the events about conversation items: create, delete, retrieve,
// truncate.
func itemCommand(base session.Base, ev protocol.ClientEvent) session.Command {
	switch e := ev.(type) {
	case *protocol.ConversationItemCreate:
		return &session.CreateItem{Base: base, ItemID: e.ItemID, PreviousItemID: e.PreviousItemID, Role: e.Role,
			Text: e.Text, TextIndex: e.TextIndex, Audio: e.Audio, ItemType: e.ItemType, CallID: e.CallID, Output: e.Output, Name: e.Name, Arguments: e.Arguments,
			ApprovalRequestID: e.ApprovalRequestID, Approve: e.Approve, Reason: e.Reason}
	case *protocol.ConversationItemDelete:
		return &session.DeleteItem{Base: base, ItemID: e.ItemID}
	case *protocol.ConversationItemRetrieve:
		return &session.RetrieveItem{Base: base, ItemID: e.ItemID}
	case *protocol.ConversationItemTruncate:
		return &session.TruncateItem{Base: base, ItemID: e.ItemID, ContentIndex: e.ContentIndex, AudioEndMs: e.AudioEndMs}
	}
	return nil
}

// ConfigPatch is session.update's session object as the session's configuration patch.
func ConfigPatch(p protocol.SessionPatch) session.ConfigPatch {
	return session.ConfigPatch{Model: p.Model, Modalities: p.Modalities, Instructions: p.Instructions, Voice: p.Voice,
		InputFormat: (*session.AudioFormat)(p.InputFormat), OutputFormat: (*session.AudioFormat)(p.OutputFormat),
		TurnDetectionSet: p.TurnDetectionSet, TurnDetection: turnDetection(p.TurnDetection),
		TranscriptionSet: p.TranscriptionSet, Transcription: p.Transcription, Type: p.Type,
		NoiseReductionSet: p.NoiseReductionSet, NoiseReduction: p.NoiseReduction,
		ToolsSet: p.ToolsSet, Tools: tools(p.Tools), ToolChoice: (*session.ToolChoice)(p.ToolChoice),
		MCPTools:     mcpTools(p.MCPTools),
		IdleTimeoutS: p.IdleTimeoutS, AutoResponse: p.AutoResponse, MaxOutputTokens: p.MaxOutputTokens,
		Temperature: p.Temperature, Seed: p.Seed, TracingSet: p.TracingSet, Tracing: p.Tracing,
		TranscriptLogprobs: p.TranscriptLogprobs, Truncation: truncation(p.Truncation)}
}

// truncation converts session.truncation (nil: absent, no change).
func truncation(t *protocol.Truncation) *duplex.Truncation {
	if t == nil {
		return nil
	}
	return &duplex.Truncation{Mode: t.Type, RetentionRatio: t.RetentionRatio, PostInstructions: t.PostInstructions}
}

// turnDetection converts a turn_detection object: each key the client sent is a value of the
// session's TurnDetection and a bit of its key set (nil: the object was null, or absent).
func turnDetection(w *protocol.TurnDetection) *session.TurnDetectionPatch {
	if w == nil {
		return nil
	}
	p := &session.TurnDetectionPatch{}
	v := &p.Value
	put(p, session.TurnKeyType, &v.Type, w.Type)
	put(p, session.TurnKeyThreshold, &v.Threshold, w.Threshold)
	put(p, session.TurnKeyPrefixPadding, &v.PrefixPaddingMs, w.PrefixPaddingMs)
	put(p, session.TurnKeySilenceDuration, &v.SilenceDurationMs, w.SilenceDurationMs)
	put(p, session.TurnKeyIdleTimeout, &v.IdleTimeoutMs, w.IdleTimeoutMs)
	put(p, session.TurnKeyCreateResponse, &v.CreateResponse, w.CreateResponse)
	put(p, session.TurnKeyInterruptResponse, &v.InterruptResponse, w.InterruptResponse)
	put(p, session.TurnKeyEagerness, &v.Eagerness, w.Eagerness)
	return p
}

// put stores a key the client sent (src non-nil) in dst and marks it sent.
func put[T any](p *session.TurnDetectionPatch, key session.TurnDetectionKeys, dst, src *T) {
	if src != nil {
		*dst = *src
		p.Keys |= key
	}
}

// tools converts the wire's function tools for the session.
func tools(in []protocol.Tool) []duplex.Tool {
	if in == nil {
		return nil
	}
	out := make([]duplex.Tool, len(in))
	for i, t := range in {
		out[i] = duplex.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters}
	}
	return out
}

// mcpTools converts session.tools' MCP entries; the session's MCPTool has the protocol's fields.
func mcpTools(in []protocol.MCPTool) []session.MCPTool {
	if in == nil {
		return nil
	}
	out := make([]session.MCPTool, len(in))
	for i, t := range in {
		out[i] = session.MCPTool(t)
	}
	return out
}
