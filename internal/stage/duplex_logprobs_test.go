package stage

import (
	"context"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
)

// requireWordLogprobs checks a final transcript's logprobs: one per word, the words in order,
// each finite and at most 0.
func requireWordLogprobs(t *testing.T, tr duplex.Transcription) {
	t.Helper()
	words := strings.Fields(tr.Text)
	require.NotEmpty(t, words, "no speech recognized")
	require.Len(t, tr.Logprobs, len(words), "one logprob per word of %q", tr.Text)
	for i, lp := range tr.Logprobs {
		require.Equal(t, words[i], lp.Word)
		require.False(t, math.IsNaN(lp.Logprob) || math.IsInf(lp.Logprob, 0), "word %q: %v", lp.Word, lp.Logprob)
		require.LessOrEqual(t, lp.Logprob, 0.0, "word %q", lp.Word)
	}
}

// TestDuplexTranscriptLogprobs: with TranscriptLogprobs a committed utterance's transcript (the
// Commit result and the Transcript output) carries its words' log posteriors, the same the
// one-shot TranscribeLogprobs gives; turned off, the next commit carries none.
func TestDuplexTranscriptLogprobs(t *testing.T) {
	p, _ := newTestPipeline(t, nil)
	ctx := context.Background()
	sink := newRecSink(t)
	d, err := p.OpenDuplex(ctx, DuplexOptions{Options: duplex.Options{MaxTokens: 1, TranscriptLogprobs: true}, RequestID: "duplex-logprobs"}, sink)
	require.NoError(t, err)
	defer d.Close()

	speech := goForward(t)
	feedUnits(t, d, speech)
	tr, err := d.commit(ctx, 0, false)
	require.NoError(t, err)
	requireWordLogprobs(t, tr)
	require.Positive(t, tr.RecognizerCPU, "the recognizer's CPU time on the utterance")
	text, want, err := p.TranscribeLogprobs(ctx, speech, nil)
	require.NoError(t, err)
	require.Equal(t, text, tr.Text)
	require.InDeltaSlice(t, logprobValues(want), logprobValues(tr.Logprobs), 1e-9, "the stream scores as the one-shot recognizer")
	require.True(t, sink.waitFor(5*time.Second, func(o []OutputMessage) bool { return len(ofKind(o, duplex.OutTranscript)) == 1 }))
	outs, _, _ := sink.snapshot()
	require.Equal(t, tr.Logprobs, ofKind(outs, duplex.OutTranscript)[0].WordLogprobs, "the Transcript output carries them too")

	require.NoError(t, d.SetTranscriptLogprobs(ctx, false))
	feedUnits(t, d, speech)
	tr, err = d.commit(ctx, 0, false)
	require.NoError(t, err)
	require.NotEmpty(t, tr.Text)
	require.Nil(t, tr.Logprobs, "turned off: not computed")

	require.NoError(t, d.SetTranscriptLogprobs(ctx, true))
	feedUnits(t, d, speech)
	tr, err = d.commit(ctx, 0, false)
	require.NoError(t, err)
	requireWordLogprobs(t, tr)
	require.Equal(t, text, tr.Text)
	require.InDeltaSlice(t, logprobValues(want), logprobValues(tr.Logprobs), 1e-9, "a later utterance of the stream scores as a first")
}

// TestDuplexTranscriptLogprobsEndpoint: an auto-response stream's VAD endpoint sends its
// Transcript output with the words' log posteriors.
func TestDuplexTranscriptLogprobsEndpoint(t *testing.T) {
	p, _ := newTestPipeline(t, nil)
	ctx := context.Background()
	sink := newRecSink(t)
	d, err := p.OpenDuplex(ctx, DuplexOptions{Options: duplex.Options{AutoResponse: true, MaxTokens: 1, TranscriptLogprobs: true}, RequestID: "duplex-logprobs-auto"}, sink)
	require.NoError(t, err)
	defer d.Close()
	feedUnits(t, d, append(goForward(t), make([]float32, 16000)...))
	require.True(t, sink.waitFor(30*time.Second, func(o []OutputMessage) bool { return len(ofKind(o, duplex.OutTranscript)) > 0 }), "no endpoint")
	outs, _, _ := sink.snapshot()
	o := ofKind(outs, duplex.OutTranscript)[0]
	requireWordLogprobs(t, duplex.Transcription{Text: o.Text, Logprobs: o.WordLogprobs})
}

// TestDuplexTranscriptLogprobsRemoteASR: a remote ASR's answer has no logprobs, so asking for
// them is refused at open and on a stream, not answered without them.
func TestDuplexTranscriptLogprobsRemoteASR(t *testing.T) {
	u := newUpstream(t, func(_ int, w http.ResponseWriter, r *http.Request, _ *upstream) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"text":"go forward"}`)
	})
	rc := u.cfg()
	p, _ := newTestPipeline(t, func(c *PipelineConfig) { c.Remote.ASR = &rc })
	require.False(t, p.HasTranscriptLogprobs())
	ctx := context.Background()
	_, err := p.OpenDuplex(ctx, DuplexOptions{Options: duplex.Options{TranscriptLogprobs: true}, RequestID: "duplex-logprobs-remote"}, newRecSink(t))
	require.ErrorIs(t, err, ErrInvalidRequest)

	d, err := p.OpenDuplex(ctx, DuplexOptions{RequestID: "duplex-logprobs-remote2"}, newRecSink(t))
	require.NoError(t, err)
	defer d.Close()
	require.ErrorIs(t, d.SetTranscriptLogprobs(ctx, true), ErrInvalidRequest)
	require.NoError(t, d.SetTranscriptLogprobs(ctx, false))
	feedUnits(t, d, goForward(t))
	tr, err := d.commit(ctx, 0, false)
	require.NoError(t, err)
	require.Equal(t, duplex.Transcription{Text: "go forward"}, tr)
}

func logprobValues(lps []audio.WordLogprob) []float64 {
	out := make([]float64, len(lps))
	for i, lp := range lps {
		out[i] = lp.Logprob
	}
	return out
}
