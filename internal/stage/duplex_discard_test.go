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

// On an auto-response stream, audio discarded in the middle of a speech segment (a short
// acknowledgement the session dropped) is forgotten, and speech that follows it with no pause
// between (the VAD's segment goes on) is still heard: a commit by hand transcribes it.
func TestDuplexDiscardMidSegment(t *testing.T) {
	b := testenv.ReadFile(t, "/usr/share/pocketsphinx/test/data/numbers.raw", "pocketsphinx-testdata")
	numbers, err := audio.PCM16BytesToFloat32(nil, b)
	require.NoError(t, err)
	p, _ := newTestPipeline(t, nil)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{AutoResponse: true, MaxTokens: 4}, RequestID: "duplex-discard-mid"}, newRecSink(t))
	require.NoError(t, err)
	defer d.Close()
	ctx := context.Background()

	gf := goForward(t)
	feedUnits(t, d, gf[:int(1.15*16000)]) // "go for-", still speaking
	require.NoError(t, d.DiscardAudio(ctx))
	feedUnits(t, d, numbers[int(0.45*16000):int(2.5*16000)]) // no pause: the VAD's segment goes on
	c, err := d.commit(ctx, 0, false)
	require.NoError(t, err, "the speech after the discard is heard")
	require.NotEmpty(t, strings.Fields(c.Text))
	require.NotContains(t, strings.Fields(strings.ToLower(c.Text)), "go", "transcript %q holds discarded words", c.Text)
}
