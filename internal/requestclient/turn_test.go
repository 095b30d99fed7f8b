package requestclient

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/stage"
)

// finalizeTurn closes turn id with reason alone, as the owner's close without any delivery
// figures (the turn registry's own rules, without EndTurn's outcome).
func (d *DuplexRequest) finalizeTurn(id int, reason string) bool {
	if d.turns == nil {
		return false
	}
	return d.turns.finalize(id, reason, false)
}

// finalizeUnstarted closes turn id with reason as a turn whose response never started.
func (d *DuplexRequest) finalizeUnstarted(id int, reason string) bool {
	if d.turns == nil {
		return false
	}
	return d.turns.finalize(id, reason, true)
}

func TestTurnHandle(t *testing.T) {
	t.Parallel()
	h := NewTurn(3)
	require.Equal(t, 3, h.ID())
	require.Equal(t, -1, h.Engine(), "no engine turn until bound")
	h.Bind(4)
	h.Bind(5)
	require.Equal(t, 4, h.Engine(), "the first binding wins")
	require.Equal(t, 3, h.ID())
	var zero Turn
	require.Equal(t, -1, zero.Engine(), "the zero handle is unbound")
}

// A turn ends once: a second EndTurn closes nothing.
func TestEndTurnOnce(t *testing.T) {
	log, logs := observed()
	d, _, _ := refDuplex(t, log)
	h := d.BeginTurn(1, "resp-once", 1, 0)
	closed, _ := d.EndTurn(h, TurnOutcome{Reason: metrics.ReasonStop, PlayedMs: -1})
	require.True(t, closed)
	closed, _ = d.EndTurn(h, TurnOutcome{Reason: metrics.ReasonStop, PlayedMs: -1})
	require.False(t, closed, "a turn ends once")
	require.Equal(t, 1, summaries(logs, "response=resp-once", "reason=stop"))
}

// EndTurn's outcome reaches the turn's record as the calls it replaces did, in their order:
// the delivered audio and underrun, the playback ack, the detach, the tool calls, then the
// close. Two streams, one closed with EndTurn and one with the registry's own calls, log
// byte-identical tables.
func TestEndTurnRecordsTheOutcome(t *testing.T) {
	calls := []metrics.ToolCallStats{{Kind: metrics.ToolKindFunction, Name: "lookup", CallID: "call_1", Start: 201, DurationMs: 250}}
	tests := []struct {
		name string
		o    TurnOutcome
		old  func(s *turnState)
	}{
		{"stop, nothing acked", TurnOutcome{Reason: metrics.ReasonStop, DeliveredMs: 1000, PlayedMs: -1},
			func(s *turnState) { s.setDelivered(1, 1, 0); s.finalize(1, metrics.ReasonStop, false) }},
		{"cut, acked, detached, with tools", TurnOutcome{Reason: metrics.ReasonBargeIn, DeliveredMs: 750, UnderrunMs: 120, PlayedMs: 500,
			DetachedMs: 40, ToolCalls: calls},
			func(s *turnState) {
				s.setDelivered(1, 0.75, 0.12)
				s.setPlayed(1, 0.5)
				s.setDetached(1, 40)
				s.addToolCalls(1, calls)
				s.finalize(1, metrics.ReasonBargeIn, false)
			}},
	}
	run := func(t *testing.T, end func(d *DuplexRequest, h Turn)) string {
		log, logs := observed()
		d, _, now := refDuplex(t, log)
		d.MarkTurnArrival(1, 100)
		d.MarkInputEnd(1, 150)
		h := d.BeginTurn(1, "resp-end", 1, 0)
		d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: stageSnap(5)})
		*now = 200.5
		d.OnOutput(stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutText, Turn: 1, Text: "hi"}, StageID: 0})
		*now = 202
		end(d, h)
		d.OnTurnEnd(stage.TurnEnd{Turn: 1})
		require.NoError(t, d.Close(context.Background(), ""))
		var out string
		for _, e := range logs.All() {
			out += e.Message + "\n"
		}
		return out
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := run(t, func(d *DuplexRequest, h Turn) {
				closed, settle := d.EndTurn(h, tt.o)
				require.True(t, closed)
				require.Nil(t, settle, "a started turn has nothing to settle")
			})
			want := run(t, func(d *DuplexRequest, _ Turn) { tt.old(d.turns) })
			require.NotEmpty(t, got)
			require.Equal(t, want, got)
		})
	}
}

// An unstarted turn's EndTurn hands back the settle that records it once its input's rows
// are delivered.
func TestEndTurnUnstartedSettles(t *testing.T) {
	log, logs := observed()
	d, _, now := refDuplex(t, log)
	d.MarkTurnArrival(1, 100)
	h := d.BeginTurn(1, "resp-unstarted", 1, 0)
	*now = 202
	closed, settle := d.EndTurn(h, TurnOutcome{Reason: metrics.ReasonCancel, PlayedMs: -1, Unstarted: true})
	require.True(t, closed)
	require.NotNil(t, settle)
	require.Zero(t, summaries(logs), "the turn waits for its input's rows")
	require.NoError(t, settle(context.Background()))
	d.OnTurnEnd(stage.TurnEnd{Turn: 1, InputSettled: true})
	require.Equal(t, 1, summaries(logs, "response=resp-unstarted", "reason=cancel"))
}
