package stage

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
)

// TestDuplexAppendSizeKeepsAllAudio: the same speech appended in units of 20 ms, 100 ms, 1 s,
// 2 s, 5 s or in one unit reaches the ASR whole, so every split gives the transcript of the whole
// clip. Units longer than the audio history were cut to their last second before (a 2 s split
// came back as "or ten meters"). Auto-response streams take the same path through the VAD.
func TestDuplexAppendSizeKeepsAllAudio(t *testing.T) {
	speech := goForward(t)
	silence := make([]float32, 16000) // 1 s: past the default silence_duration_ms endpoint
	p, _ := newTestPipeline(t, nil)
	ctx := context.Background()
	for _, auto := range []bool{false, true} {
		for _, unit := range []int{320, 1600, 16000, 32000, 80000, len(speech)} {
			t.Run(fmt.Sprintf("auto=%v/unit=%d", auto, unit), func(t *testing.T) {
				sink := newRecSink(t)
				d, err := p.OpenDuplex(ctx, DuplexOptions{Options: duplex.Options{AutoResponse: auto, MaxTokens: 1}, RequestID: fmt.Sprintf("duplex-chunks-%v-%d", auto, unit)}, sink)
				require.NoError(t, err)
				defer d.Close()
				for off := 0; off < len(speech); off += unit {
					require.NoError(t, d.AppendAudio(ctx, 0, speech[off:min(off+unit, len(speech))]))
				}
				var tr string
				if !auto {
					var c duplex.Transcription
					c, err = d.commit(ctx, 0, false)
					require.NoError(t, err)
					tr = c.Text
				} else {
					require.NoError(t, d.AppendAudio(ctx, 0, silence))
					require.True(t, sink.waitFor(30*time.Second, func(outs []OutputMessage) bool {
						return len(ofKind(outs, duplex.OutTranscript)) > 0
					}), "no transcript at the endpoint")
					outs, _, _ := sink.snapshot()
					tr = ofKind(outs, duplex.OutTranscript)[0].Text
				}
				require.Equal(t, 1.0, wordOverlap(tr, "go forward ten meters"), "transcript %q", tr)
			})
		}
	}
}
