package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// Engine failures are counted by cause, every cause present from start-up at 0; a cause this
// package does not know counts as unknown (the label stays bounded).
func TestCountEngineError(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	c := NewCollectors(reg, "dummy:tiny")
	for _, k := range EngineErrorCauses {
		require.InDelta(t, 0.0, testutil.ToFloat64(c.engineErrors.WithLabelValues(k)), 0, k)
	}
	c.CountEngineError(CauseDecodeFailed)
	c.CountEngineError(CauseDecodeFailed)
	c.CountEngineError("a cause from the future")
	require.InDelta(t, 2.0, testutil.ToFloat64(c.engineErrors.WithLabelValues(CauseDecodeFailed)), 0)
	require.InDelta(t, 1.0, testutil.ToFloat64(c.engineErrors.WithLabelValues(CauseUnknown)), 0)
	require.Equal(t, len(EngineErrorCauses), testutil.CollectAndCount(c.engineErrors))

	// The engine's own count of failed decode steps is read at scrape time.
	c.SetEngineKV(func() EngineKV { return EngineKV{DecodeErrors: 3} })
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP omniserve_engine_decode_errors_total Decode steps llama.cpp failed for another reason than a full KV cache (each failed the step's sequences with cause decode_failed).
# TYPE omniserve_engine_decode_errors_total counter
omniserve_engine_decode_errors_total{model_name="dummy:tiny"} 3
`), "omniserve_engine_decode_errors_total"))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}
