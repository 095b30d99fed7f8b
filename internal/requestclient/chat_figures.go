package requestclient

import (
	"slices"

	"github.com/omniserve/omniserve/internal/metrics"
)

// chatFigures is what Prometheus observes for one chat request, taken directly from the stage
// snapshots and connector sends: the stage rows (only the fields Collectors.ObserveFinalized
// reads), one row per edge and the e2e time. The values are those the aggregator's
// FinalizedRequest gives (TestChatFiguresMatchAggregator), without its maps and tables.
// Guarded by the chatState's mu; a nil *chatFigures records nothing.
type chatFigures struct {
	stages []metrics.StageRequestStats
	edges  []metrics.TransferEdgeStats
	e2eMs  float64
}

func (f *chatFigures) addStage(stageID int, m metrics.StageRequestStats) {
	if f == nil {
		return
	}
	f.stages = append(f.stages, metrics.StageRequestStats{
		StageID: stageID, NumTokensIn: m.NumTokensIn, NumTokensOut: m.NumTokensOut,
		StageGenTimeMs: m.StageGenTimeMs, VllmTtftMs: m.VllmTtftMs, VllmItlsMs: slices.Clone(m.VllmItlsMs),
		AudioGeneratedFrames: m.AudioGeneratedFrames, AudioSampleRate: m.AudioSampleRate, AudioDurationS: m.AudioDurationS,
	})
	if stageID > 0 { // the RX side of the edge that fed the stage, as the aggregator records it
		e := f.edge(stageID-1, stageID)
		if e.SizeBytes == 0 {
			e.SizeBytes = int64(m.RxTransferBytes)
		}
		e.RxDecodeTimeMs += m.RxDecodeTimeMs
		e.InFlightTimeMs += m.RxInFlightTimeMs
	}
}

func (f *chatFigures) addSend(from, to int, sizeBytes int64, txMs float64) {
	if f == nil {
		return
	}
	e := f.edge(from, to)
	e.SizeBytes += sizeBytes
	e.TxTimeMs += txMs
}

func (f *chatFigures) edge(from, to int) *metrics.TransferEdgeStats {
	for i := range f.edges {
		if f.edges[i].FromStage == from && f.edges[i].ToStage == to {
			return &f.edges[i]
		}
	}
	f.edges = append(f.edges, metrics.TransferEdgeStats{FromStage: from, ToStage: to})
	return &f.edges[len(f.edges)-1]
}

func (f *chatFigures) record(reason string) metrics.FinalizedRequest {
	return metrics.FinalizedRequest{
		FinishedReason: reason,
		E2E:            metrics.RequestE2EStats{E2ETotalMs: f.e2eMs},
		Stages:         f.stages,
		Transfers:      f.edges,
	}
}
