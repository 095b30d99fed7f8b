package requestclient

import (
	"context"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
)

// Turn is the handle of one response's turn: BeginTurn returns it, and every later call of the
// response takes it (Respond, EndTurn). It names the turn twice:
//   - ID is the session's id of the input the response answers: the turn's rows, outputs and
//     record carry it (duplex_turns.go).
//   - Engine is the engine turn the response's outputs carry, -1 until its owner, the session's
//     actor, binds it (the id Respond returned, or the turn of the stream's own speak decision).
//
// It is a value (beginning a response allocates nothing, with statistics off as on): the owner
// keeps it and binds its engine turn; a response's job passes a copy to Respond, which reads
// only the id, which never changes.
type Turn struct {
	id     int
	engine int
	bound  bool
}

// NewTurn returns the handle of turn id with no engine turn bound: what BeginTurn returns, and
// what an engine that keeps no turns (a test engine) may return.
func NewTurn(id int) Turn { return Turn{id: id} }

// ID is the id of the input the response answers.
func (t Turn) ID() int { return t.id }

// Engine is the engine turn the response's outputs carry; -1 until bound.
func (t Turn) Engine() int {
	if !t.bound {
		return -1
	}
	return t.engine
}

// Bind binds the engine turn n unless one is bound already (the first wins).
func (t *Turn) Bind(n int) {
	if !t.bound {
		t.engine, t.bound = n, true
	}
}

// TurnOutcome is how a response's turn ended: its reason and what its record keeps of the
// delivery, handed over once, when the owner ends the response.
type TurnOutcome struct {
	Reason string // the finished_reason the turn is recorded with
	// DeliveredMs is the audio sent to the client; UnderrunMs the time its playback ran out of
	// sent audio.
	DeliveredMs, UnderrunMs float64
	// PlayedMs is the audio the client acknowledged as played (its last playback.ack); < 0: the
	// client acknowledged none.
	PlayedMs float64
	// DetachedMs is how long delivery was paused by a disconnect the client resumed (0: none).
	DetachedMs float64
	// ToolCalls are the tool calls timed for the turn (the MCP calls the server ran during it,
	// the function calls whose outputs came before it): its table, Prometheus and its trace
	// read them from the record.
	ToolCalls []metrics.ToolCallStats
	// Unstarted: the response was cancelled before its engine response started, and never will
	// (its job sees the cancel). Its input may still be on its way: the record waits for it.
	Unstarted bool
}

// BeginTurn attaches turn's response (responseID, its wire turnID) as the response begins and
// returns the turn's handle; idempotent. A begun older turn its owner never closed is recorded
// as aborted and reported by Unclosed.
func (d *DuplexRequest) BeginTurn(turn int, responseID string, turnID int, arrival float64) Turn {
	if d.turns != nil && responseID != "" {
		d.turns.begin(turn, d.Stage0ID(), responseID, turnID, arrival)
	}
	return NewTurn(turn)
}

// Respond starts the response of t after every earlier input, with spec's per-response options
// (instructions, input, out of band, tools) when it has any, and returns the engine turn it runs
// under (t's id, unless the stream already answered that input by itself: then the next).
func (d *DuplexRequest) Respond(ctx context.Context, t Turn, spec duplex.ResponseSpec) (int, error) {
	turn := t.ID()
	if plain(spec) {
		return d.respond(ctx, turn, func(ctx context.Context) (int, error) { return d.stream.Respond(ctx, turn, spec.MaxTokens) })
	}
	rs, ok := d.stream.(specResponder)
	if !ok {
		return 0, errSpecUnsupported
	}
	return d.respond(ctx, turn, func(ctx context.Context) (int, error) { return rs.RespondWith(ctx, turn, spec) })
}

// plain reports a response with nothing but its length: the stream's plain Respond runs it.
func plain(spec duplex.ResponseSpec) bool {
	return spec.Instructions == nil && !spec.OutOfBand && spec.Input == nil && spec.Tools == nil && spec.Temperature == nil
}

// EndTurn is the owner's close of t's turn with its outcome, once (a second close returns false).
// The delivery figures join the turn first, as long as it is not recorded; an interrupted turn (any reason but
// stop and length) is recorded once its stages reported its response finished, at once when no
// response runs for it, or at Close (duplex_turns.go).
//
// A turn whose response never started (Outcome.Unstarted) is recorded once the rows of the input
// it answered are delivered: settle, run after the commands of that input (the session's job
// queue keeps their order), asks the stream to report them; without it the turn is recorded
// when the stream closes. settle is nil for a turn that started.
func (d *DuplexRequest) EndTurn(t Turn, o TurnOutcome) (closed bool, settle func(context.Context) error) {
	turn := t.ID()
	if o.Unstarted {
		settle = func(ctx context.Context) error { return d.settleInput(ctx, turn) }
	}
	if d.turns == nil {
		return false, settle
	}
	d.turns.setDelivered(turn, o.DeliveredMs/1000, o.UnderrunMs/1000)
	if o.PlayedMs >= 0 {
		d.turns.setPlayed(turn, o.PlayedMs/1000)
	}
	if o.DetachedMs > 0 {
		d.turns.setDetached(turn, o.DetachedMs)
	}
	if len(o.ToolCalls) > 0 {
		d.turns.addToolCalls(turn, o.ToolCalls)
	}
	return d.turns.finalize(turn, o.Reason, o.Unstarted), settle
}
