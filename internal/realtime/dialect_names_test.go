package realtime

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/realtime/vllm"
	"github.com/omniserve/omniserve/internal/session"
)

// Every dialect's name is a value of the dialect label (metrics.Dialects): a name outside it
// would count its sessions' turns as OpenAI's.
func TestDialectNamesAreLabelValues(t *testing.T) {
	t.Parallel()
	for _, d := range []dialect{openAIDialect{}, vllm.New()} {
		require.Contains(t, metrics.Dialects, d.Name())
	}
	require.Equal(t, metrics.DialectVllmDuplex, dialectFor(session.Options{Duplex: true}).Name())
	require.Equal(t, metrics.DialectOpenAI, dialectFor(session.Options{}).Name())
}
