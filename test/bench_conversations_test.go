package test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBenchConversationsWebRTCShare runs the real `bin/omniserve bench conversations` with half
// of a step of two conversations over a WebRTC call (a child `serve`, a warm-up conversation on
// each transport, one 20 s step; about a minute): the call's turns are heard (its own rtc_ keys
// have samples), the WebSocket's too (ws_ keys), the step says how many were calls, and no
// conversation failed with an error, whether or not the loaded machine kept up. A share out of
// range, or calls on a dialect that has none, are refused before anything starts.
func TestBenchConversationsWebRTCShare(t *testing.T) {
	if testing.Short() {
		t.Skip("a real bench run of about a minute")
	}
	bin := omniserveBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--webrtc-share", "1.5"}, "--webrtc-share 1.5: want a share from 0 to 1"},
		{[]string{"--webrtc-share", "0.5", "--dialect", "vllm"}, `WebRTC calls (POST /v1/realtime/calls) speak the realtime dialect, not "vllm"`},
	} {
		out, err := exec.CommandContext(ctx, bin, append([]string{"bench", "conversations"}, bad.args...)...).CombinedOutput()
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "%v: %s", err, out)
		require.Equal(t, 2, ee.ExitCode(), "a usage error: %s", out)
		require.Contains(t, string(out), bad.want)
	}

	cmd := exec.CommandContext(ctx, bin, "bench", "conversations", "--steps", "2", "--step-time", "20s", "--webrtc-share", "0.5")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr: %s", tail(stderr.String(), 3000))
	all := stdout.String() + stderr.String()
	t.Logf("bench conversations:\n%s", stdout.String())
	require.Regexp(t, `warm-up \(WebRTC\): [1-9]\d* turns`, all)
	require.Regexp(t, `step 2 conversations \(1 over WebRTC\): [1-9]\d* turns`, all)
	require.NotContains(t, all, "FAILED (error", "no conversation ended in an error")
	require.Contains(t, stdout.String(), "conv_realtime_n2_rtc_conversations=1\n")
	for _, k := range []string{"rtc_speech_end_to_audible_ms_p50", "ws_speech_end_to_audible_ms_p50", "speech_end_to_audible_ms_p99"} {
		require.Regexp(t, `conv_realtime_n2_`+k+`=\d+\n`, stdout.String(), "the turns of both transports were heard")
	}
}
