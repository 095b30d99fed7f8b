package realtime

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/session"
)

// Every dialect's name is a value of the dialect label (metrics.Dialects): a name outside it
// would count its sessions' turns as OpenAI's.
func TestDialectNamesAreLabelValues(t *testing.T) {
	t.Parallel()
	h := &handler{}
	for _, tc := range []struct {
		opts   session.Options
		isLive bool
		want   string
	}{
		{session.Options{}, false, metrics.DialectOpenAI},
		{session.Options{Duplex: true}, false, metrics.DialectVllmDuplex},
		{session.Options{Duplex: true}, true, metrics.DialectGPTLive},
	} {
		d := h.dialectFor(tc.opts, tc.isLive)
		require.Equal(t, tc.want, d.Name())
		require.Contains(t, metrics.Dialects, d.Name())
	}
}
