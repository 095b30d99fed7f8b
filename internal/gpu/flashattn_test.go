package gpu

import (
	"context"
	"strings"
	"testing"

	"github.com/ollama/ollama/ml"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestFlashAttentionMapping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		setting string
		onGPU   bool
		want    ml.FlashAttentionType
	}{
		{FlashAttentionAuto, false, ml.FlashAttentionDisabled},
		{FlashAttentionAuto, true, ml.FlashAttentionAuto},
		{FlashAttentionOn, false, ml.FlashAttentionEnabled},
		{FlashAttentionOn, true, ml.FlashAttentionEnabled},
		{FlashAttentionOff, false, ml.FlashAttentionDisabled},
		{FlashAttentionOff, true, ml.FlashAttentionDisabled},
	} {
		require.Equal(t, tc.want, flashAttention(tc.setting, tc.onGPU), "%s on GPU %v", tc.setting, tc.onGPU)
	}
}

func TestFlashAttentionInvalid(t *testing.T) {
	t.Parallel()
	_, err := Config{FlashAttention: "sometimes"}.withDefaults()
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.Contains(t, err.Error(), "flash_attention")
}

// The context llama.cpp creates on the CPU has flash attention as configured, and off by
// default: its kernel walks the context cell by cell, which made every generated token cost
// ~3× more with a tools declaration in context (issue 24). llama.cpp's own log line is the
// witness: it prints the setting it was given when it creates the context.
func TestFlashAttentionOnCPUContext(t *testing.T) {
	tiny, err := ensureDummy(testCacheDir, dummyPresets["tiny"])
	require.NoError(t, err)
	for _, tc := range []struct{ setting, want string }{
		{"", "disabled"}, {FlashAttentionOff, "disabled"}, {FlashAttentionOn, "enabled"},
	} {
		core, logs := observer.New(zapcore.DebugLevel)
		stop := RouteLlamaLogs(zap.New(core))
		r, err := Load(context.Background(), Config{Model: tiny, Device: "cpu", Threads: 1, FlashAttention: tc.setting}, zap.NewNop())
		stop()
		require.NoError(t, err)
		require.NoError(t, r.Close())
		got := ""
		for _, e := range logs.All() {
			if k, v, ok := strings.Cut(e.Message, "flash_attn"); ok && strings.HasPrefix(k, "llama_context") {
				got = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), "="))
			}
			require.NotContains(t, e.Message, "Flash Attention was auto", "setting %q: llama.cpp decided by itself", tc.setting)
		}
		require.Equal(t, tc.want, got, "setting %q", tc.setting)
	}
}
