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

// Decode parses one client event (a text frame, GA or beta) into a session command, or the
// error event's error for a frame that is not a valid client event. The session's
// configuration types have the protocol's shape, so the mapping is conversion.
func Decode(data []byte) (session.Command, *protocol.Error) {
	ev, werr := protocol.DecodeClientEvent(data)
	if werr != nil {
		return nil, werr
	}
	base := session.Base{ID: ev.EventID(), Kind: ev.Type()}
	switch e := ev.(type) {
	case *protocol.SessionUpdate:
		return &session.UpdateSession{Base: base, Patch: ConfigPatch(e.Session), BetaSpelling: e.BetaSpelling, Transcription: e.Transcription}, nil
	case *protocol.InputAudioBufferAppend:
		return &session.AppendAudio{Base: base, Data: e.Audio, Format: (*session.AudioFormat)(e.Format)}, nil
	case *protocol.InputAudioBufferCommit:
		return &session.CommitInput{Base: base, ResponseCreate: e.ResponseCreate}, nil
	case *protocol.InputAudioBufferClear:
		return &session.ClearInput{Base: base}, nil
	case *protocol.ResponseCreate:
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
		return c, nil
	case *protocol.ResponseCancel:
		return &session.CancelResponse{Base: base, ResponseID: e.ResponseID}, nil
	case *protocol.ConversationItemCreate:
		return &session.CreateItem{Base: base, ItemID: e.ItemID, PreviousItemID: e.PreviousItemID, Role: e.Role,
			Text: e.Text, Audio: e.Audio, ItemType: e.ItemType, CallID: e.CallID, Output: e.Output,
			ApprovalRequestID: e.ApprovalRequestID, Approve: e.Approve, Reason: e.Reason}, nil
	case *protocol.ConversationItemDelete:
		return &session.DeleteItem{Base: base, ItemID: e.ItemID}, nil
	case *protocol.ConversationItemRetrieve:
		return &session.RetrieveItem{Base: base, ItemID: e.ItemID}, nil
	case *protocol.ConversationItemTruncate:
		return &session.TruncateItem{Base: base, ItemID: e.ItemID, ContentIndex: e.ContentIndex, AudioEndMs: e.AudioEndMs}, nil
	case *protocol.OutputAudioBufferClear:
		return &session.ClearOutputAudio{Base: base, ResponseID: e.ResponseID}, nil
	case *protocol.InputCancel:
		return &session.CancelInput{Base: base}, nil
	case *protocol.BargeIn:
		return &session.BargeIn{Base: base}, nil
	case *protocol.SessionClose:
		return &session.CloseSession{Base: base}, nil
	case *protocol.SessionHeartbeat:
		return &session.Heartbeat{Base: base}, nil
	case *protocol.SessionResume:
		return &ResumeSession{Base: base, SessionID: e.SessionID, Token: e.Token, LastSeq: e.LastSeq}, nil
	case *protocol.PlaybackAck:
		return &session.PlaybackAck{Base: base, PlayedMs: e.PlayedMs, ResponseID: e.ResponseID, ItemID: e.ItemID, Truncate: e.Truncate}, nil
	}
	panic("openai: client event without a command: " + ev.Type()) // protocol and this switch list the same events
}

// ConfigPatch is session.update's session object as the session's configuration patch.
func ConfigPatch(p protocol.SessionPatch) session.ConfigPatch {
	return session.ConfigPatch{Model: p.Model, Modalities: p.Modalities, Instructions: p.Instructions, Voice: p.Voice,
		InputFormat: (*session.AudioFormat)(p.InputFormat), OutputFormat: (*session.AudioFormat)(p.OutputFormat),
		TurnDetectionSet: p.TurnDetectionSet, TurnDetection: (*session.TurnDetectionPatch)(p.TurnDetection),
		TranscriptionSet: p.TranscriptionSet, Transcription: p.Transcription, Type: p.Type,
		NoiseReductionSet: p.NoiseReductionSet, NoiseReduction: p.NoiseReduction,
		ToolsSet: p.ToolsSet, Tools: tools(p.Tools), ToolChoice: (*session.ToolChoice)(p.ToolChoice),
		MCPTools:     mcpTools(p.MCPTools),
		IdleTimeoutS: p.IdleTimeoutS, AutoResponse: p.AutoResponse, MaxOutputTokens: p.MaxOutputTokens,
		Temperature: p.Temperature, Seed: p.Seed, TracingSet: p.TracingSet, Tracing: p.Tracing,
		TranscriptLogprobs: p.TranscriptLogprobs}
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
