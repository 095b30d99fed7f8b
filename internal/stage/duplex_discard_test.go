package stage

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/testenv"
)

// TestDuplexDiscardAudio: audio streamed into a manual-turn stream and then discarded
// (input_audio_buffer.clear) leaves no trace in the next commit's transcript, which holds only
// what was appended after the discard; a discard with nothing heard is a no-op, and a commit
// right after a discard has nothing to transcribe.
func TestDuplexDiscardAudio(t *testing.T) {
	b := testenv.ReadFile(t, "/usr/share/pocketsphinx/test/data/numbers.raw", "pocketsphinx-testdata")
	numbers, err := audio.PCM16BytesToFloat32(nil, b)
	require.NoError(t, err)
	p, _ := newTestPipeline(t, nil)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{MaxTokens: 4}, RequestID: "duplex-discard"}, newRecSink(t))
	require.NoError(t, err)
	defer d.Close()
	ctx := context.Background()

	require.NoError(t, d.DiscardAudio(ctx), "nothing heard yet")
	feedUnits(t, d, numbers[:min(len(numbers), 4*16000)])
	require.NoError(t, d.DiscardAudio(ctx))
	_, err = d.commit(ctx, 0, false)
	require.ErrorIs(t, err, audio.ErrEmptyAudio, "the discarded audio is gone")

	feedUnits(t, d, numbers[:min(len(numbers), 4*16000)])
	require.NoError(t, d.DiscardAudio(ctx))
	feedUnits(t, d, goForward(t))
	c, err := d.commit(ctx, 0, false)
	require.NoError(t, err)
	tr := c.Text
	require.GreaterOrEqual(t, wordOverlap(tr, "go forward ten meters"), 0.75, "transcript %q", tr)
	require.LessOrEqual(t, len(strings.Fields(tr)), 5, "transcript %q holds discarded words", tr)
}
