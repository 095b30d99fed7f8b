package metrics

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func jsonLogger(buf *bytes.Buffer) *zap.Logger {
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(buf), zapcore.InfoLevel))
}

func parseRecords(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		recs = append(recs, m)
	}
	return recs
}

// With structured records each table is one JSON record whose fields are the table's rows and
// the turn's ids, and the values equal the printed table's.
func TestStructuredRecordsOnePerTable(t *testing.T) {
	t.Parallel()
	turn, _ := duplexExample(t)
	turn.SetStructuredRecords(true)
	var buf bytes.Buffer
	require.True(t, turn.Finalize(ReasonStop, jsonLogger(&buf), true))
	recs := parseRecords(t, &buf)
	text := turn.summarySnapshot().Entries // the same record rendered as text, for comparison
	require.Len(t, recs, len(text), "one record per table and one for [OmniTiming]")
	var kinds []string
	for _, r := range recs {
		kinds = append(kinds, r["msg"].(string))
		require.Equal(t, turn.requestID, r["request_id"])
		require.Equal(t, turn.ResponseID(), r["response_id"])
		require.Equal(t, "stop", r["reason"])
		require.NotContains(t, r["msg"], "+---", "no ASCII table in the message")
	}
	require.Equal(t, []string{"Overall Summary", "RequestE2EStats", "OmniTiming", "StageRequestStats", "TransferEdgeStats"}, kinds)
	rec, ok := turn.Record()
	require.True(t, ok)
	e2e := rec.E2E
	require.InDelta(t, e2e.E2ETotalMs, recs[1]["e2e_total_ms"], 1e-9)
	require.InDelta(t, float64(e2e.E2ETotalTokens), recs[1]["e2e_total_tokens"], 0)
	require.Contains(t, text, recs[2]["line"], "the OmniTiming record carries the printed line")
	stages := recs[3]["stages"].([]any)
	rows := turn.StageRows()
	require.Len(t, stages, len(rows))
	for i, st := range stages {
		col := st.(map[string]any)
		require.InDelta(t, float64(rows[i].StageID), col["stage_id"], 0)
		require.InDelta(t, float64(rows[i].NumTokensOut), col["num_tokens_out"], 0)
		require.InDelta(t, rows[i].StageGenTimeMs, col["stage_gen_time_ms"], 1e-9)
		_, hidden := col["rx_decode_time_ms"]
		require.False(t, hidden, "excluded fields stay excluded")
	}
	edges := recs[4]["edges"].([]any)
	require.Len(t, edges, len(rec.Transfers))
}
