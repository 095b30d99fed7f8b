package gpu

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestLlamaLogSinkAssemblesLines(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	s := &llamaLogSink{log: zap.New(core)}
	s.write(ggmlLogInfo, "llama_model_loader: loaded meta data with ")
	s.write(ggmlLogCont, "25 key-value pairs\n")
	s.write(ggmlLogWarn, "first warning\nsecond ")
	s.write(ggmlLogCont, "warning\n")
	s.write(ggmlLogError, "\n") // an empty line is not a record
	all := logs.All()
	require.Len(t, all, 3)
	require.Equal(t, "llama_model_loader: loaded meta data with 25 key-value pairs", all[0].Message)
	require.Equal(t, zapcore.DebugLevel, all[0].Level, "the library's info chatter is debug")
	require.Equal(t, "first warning", all[1].Message)
	require.Equal(t, zapcore.WarnLevel, all[1].Level)
	require.Equal(t, "second warning", all[2].Message)
	require.Equal(t, zapcore.WarnLevel, all[2].Level, "a continuation keeps its line's level")
}

// A real model load goes through the routed callback: the loader's lines arrive as zap records
// of the "llama" logger, not as text on stderr.
func TestRouteLlamaLogsCapturesModelLoad(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	stop := RouteLlamaLogs(zap.New(core))
	defer stop()
	tiny, err := ensureDummy(testCacheDir, dummyPresets["tiny"])
	require.NoError(t, err)
	r, err := Load(context.Background(), Config{Model: tiny, Threads: 1}, zap.NewNop())
	require.NoError(t, err)
	require.NoError(t, r.Close())
	stop()
	require.Positive(t, logs.Len(), "the loader's lines came through zap")
	for _, e := range logs.All() {
		require.Equal(t, "llama", e.LoggerName)
	}
	t.Logf("llama.cpp records routed for one model load: %d", logs.Len())
}
