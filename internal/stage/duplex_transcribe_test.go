package stage

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
)

// TestDuplexTranscribeOnlyPrefillsNothing: a transcription session's stream sends its
// transcripts but keeps no conversation, so the thinker reads neither the instructions nor the
// transcripts; a conversation's stream, opened the same way, reads both.
func TestDuplexTranscribeOnlyPrefillsNothing(t *testing.T) {
	p, _ := newTestPipeline(t, nil)
	ctx := context.Background()
	speech := goForward(t)
	for _, tc := range []struct {
		name           string
		transcribeOnly bool
		history        int // messages kept: the instructions and the user's transcript
	}{
		{"conversation", false, 2},
		{"transcription", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := newRecSink(t)
			d, err := p.OpenDuplex(ctx, DuplexOptions{Options: duplex.Options{MaxTokens: 1, Instructions: "You are a helpful assistant.", TranscribeOnly: tc.transcribeOnly}, RequestID: "duplex-tx-" + tc.name}, sink)
			require.NoError(t, err)
			defer d.Close()
			feedUnits(t, d, speech)
			tr, err := d.commit(ctx, 0, false)
			require.NoError(t, err)
			require.Contains(t, tr.Text, "forward")
			require.True(t, sink.waitFor(5*time.Second, func(o []OutputMessage) bool { return len(ofKind(o, duplex.OutTranscript)) == 1 }),
				"the transcript goes out either way")
			d.conv.mu.Lock()
			history := len(d.conv.history)
			d.conv.mu.Unlock()
			require.Equal(t, tc.history, history)
			if tc.transcribeOnly {
				require.Zero(t, d.conv.seq.HistoryLen(), "nothing was queued for the thinker to prefill")
				require.Zero(t, len(d.jobs))
				return
			}
			require.Eventually(t, func() bool { return d.conv.seq.HistoryLen() > 0 }, 30*time.Second, 10*time.Millisecond,
				"a conversation's stream prefills its instructions and the transcript")
		})
	}
}
