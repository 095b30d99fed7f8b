package session

import (
	"context"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// frameMs is the pacing unit: talker audio is cut into frames of this length so a barge-in
// stops within one frame of real time.
const frameMs = 100

type frame struct {
	data []byte
	ms   float64
	text string
	ref  []float32 // the frame at 16 kHz, the echo canceller's reference (only while a VAD listens)
}

type sentFrame struct {
	startMs float64
	text    string
}

type response struct {
	calls []*item // the function_call and mcp_* items the reply made (tools.go, mcp_call.go)
	mcp   mcpResp // its MCP calls (mcp_call.go)
	// toolCalls are the calls timed for its turn's statistics: its MCP calls, and the function
	// calls whose outputs arrived before it started (metrics.ToolCallStats).
	toolCalls []metrics.ToolCallStats
	// id, itemID, epoch and turnID are the response's wire ids (response_id, item_id, and the
	// omniserve extension's epoch and turn_id).
	id, itemID string
	epoch      int
	turnID     int
	// turn is the response's turn as the engine knows it (requestclient.Turn): the id of the input
	// it answers (Session.input when it began), and the engine turn its outputs carry once bound.
	// Respond takes it, and the session ends it once (responses.ended, the endTurn call).
	turn        requestclient.Turn
	audio       bool
	maxTokens   int
	temperature *float64    // its own sampling temperature (nil: the session's)
	cancelled   atomic.Bool // read by the job goroutine before it starts generation
	// claimed is set by the response's job right before it reads cancelled and starts the
	// engine response (claimEngine); jobbed says such a job was queued (actor only). A response
	// cancelled while a queued job has not claimed it never reaches the engine.
	claimed atomic.Bool
	jobbed  bool

	play     playback // its audio frames, what was sent and what the client played (responses.go)
	out      replyText
	finished bool
	finish   string

	format       AudioFormat       // output audio format of this response
	metadata     map[string]string // response.create metadata, echoed
	engineUsage  *duplex.Usage     // the engine's count of the response, when it reported one
	inputUsage   usage             // the audio of the context the response read (usage.go)
	ownInput     bool              // the response read its own input[], not the conversation
	prevItemID   *string           // the item before the response's item
	truncated    bool              // the client truncated the item while it played
	clearedAudio bool              // output_audio_buffer.cleared went out
	// outOfBand: conversation "none"; the item lives here only, never in the conversation.
	outOfBand bool
	item      *item // the response's output item
}

// respOptions are the per-response settings of response.create (or the session's).
type respOptions struct {
	audio     bool
	maxTokens int
	format    AudioFormat
	metadata  map[string]string
	// Per-response context (response_spec.go): nil / false = the session's and the conversation.
	instructions *string
	input        []duplex.Message
	inputAudio   int // audio tokens of the conversation items input references (usage.go)
	outOfBand    bool
	// tools are the functions the reply may call (nil: none); set on the actor. mcpRefs are
	// the MCP tools among them by name (nil: the session's), mcpDepth counts follow-ups.
	tools    *duplex.ToolSpec
	mcpRefs  map[string]mcpRef
	mcpDepth int
	// temperature samples this response alone (nil: the session's).
	temperature *float64
}

// heardText is the assistant text the user has heard: what was sent, clipped to the client's
// playback acknowledgement when there is one.
func (r *response) heardText() string {
	if !r.audio {
		return r.out.text.String()
	}
	var b strings.Builder
	for _, f := range r.play.sent {
		if r.play.playedMs >= 0 && f.startMs >= r.play.playedMs {
			break
		}
		b.WriteString(f.text)
	}
	return b.String()
}

// claimEngine is called by the response's job before it starts the engine response: false
// when the response was cancelled (the job must not start it).
func (r *response) claimEngine() bool {
	r.claimed.Store(true)
	return !r.cancelled.Load()
}

// neverStarts reports, on the actor, a cancelled response whose queued job has not claimed it:
// the job will see the cancel, so no engine response will ever start for it. (Both sides store
// their flag before reading the other's, so one of them sees the other.)
func (r *response) neverStarts() bool {
	return r.jobbed && r.turn.Engine() < 0 && r.cancelled.Load() && !r.claimed.Load()
}

// itemIn is the response's output item: in the conversation c unless out of band (nil when the
// client deleted it).
func (r *response) itemIn(c *conversation) *item {
	if r.outOfBand {
		return r.item
	}
	return c.find(r.itemID)
}

// settleJob ends the turn of a response cancelled before its engine response started (e.g. a
// response.cancel right after response.create while the input's commit is still queued): the
// turn waits for that input's work (its transcription and prefill), which this job, queued
// behind the input's own jobs, reports settled. Without room for it the turn is recorded when
// the stream closes.
func settleJob(settle func(context.Context) error, log *zap.Logger) job {
	return job{run: func(ctx context.Context) jobResult {
		if err := settle(ctx); err != nil {
			log.Debug("settling the input of a cancelled response", zap.Error(err))
		}
		return jobResult{} // statistics only: nothing for the client
	}}
}

// onOutput routes one engine output of the response's turn.
func (s *Session) onResponseOutput(r *response, o duplex.Output) {
	switch o.Kind {
	case duplex.OutText:
		s.send(r.textOutput(o)...)
	case duplex.OutAudio:
		if !r.audio {
			return
		}
		s.responses.turnState = turnAssistantPlaying
		r.play.queueAudio(o.Audio, r.out.joinTranscript(o.Text), r.format, s.settings.listening(), outputFrameMs(s.settings.opts))
		s.run(paceOutput{})
	case duplex.OutUsage:
		if o.Usage != nil {
			u := *o.Usage
			r.engineUsage = &u
		}
	case duplex.OutToolCall:
		if o.ToolCall != nil && !s.tools.emitMCPCall(r, o.ToolCall, s.settings.cfg) {
			s.tools.emitFunctionCall(r, o.ToolCall)
		}
	case duplex.OutFinished:
		r.finished = true
		r.finish = o.FinishReason
		s.run(paceOutput{})
	case duplex.OutError:
		code := outputErrorCode(o.Err)
		cause := s.link.obs.engineFailed(code, o.Err, true, s.epoch)
		s.run(failActive{r: r, code: code, msg: engineErrorMessage(o.Err, cause), err: o.Err})
	}
}

func errString(err error) string {
	if err == nil {
		return "engine error"
	}
	return err.Error()
}

// doneStatus maps the engine's finish reason of a response that ran to its end to the
// response.done status, the finished_reason its turn is logged with, and the status details.
func doneStatus(finish string) (status, reason string, details *StatusDetails) {
	switch finish {
	case "length":
		return "incomplete", "stop", &StatusDetails{Type: "incomplete", Reason: "max_output_tokens"}
	case "error":
		return "failed", "error", &StatusDetails{Type: "failed", Reason: "engine_error"}
	case "abort":
		return "cancelled", "abort", &StatusDetails{Type: "cancelled", Reason: "abort"}
	case duplex.FinishToolCalls:
		return "completed", duplex.FinishToolCalls, nil // completed, logged as a turn that ended in calls
	}
	return "completed", "stop", nil
}
