package stage

import (
	"context"
	"encoding/binary"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
)

// TestPhraseTrimmerMatchesTrimSilence: fed in pieces of any size, the streaming trimmer gives
// exactly what TrimSilence gives for the whole phrase.
func TestPhraseTrimmerMatchesTrimSilence(t *testing.T) {
	t.Parallel()
	const rate = 24000
	loud := func(n int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(0.3 * math.Sin(float64(i)/7))
		}
		return s
	}
	quiet := func(n int) []float32 { return make([]float32, n) }
	join := func(parts ...[]float32) []float32 {
		var r []float32
		for _, p := range parts {
			r = append(r, p...)
		}
		return r
	}
	phrases := map[string][]float32{
		"lead, pause, tail": join(quiet(9000), loud(4000), quiet(5000), loud(3000), quiet(8000)),
		"no silence":        loud(6000),
		"all silence":       quiet(12000),
		"short lead":        join(quiet(10), loud(500), quiet(10)),
	}
	for name, pcm := range phrases {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, 1))
			for _, lead := range []int{firstLeadMs, phraseLeadMs} {
				want := audio.TrimSilence(pcm, rate, silenceDBFS, lead, phraseTailMs)
				tr := newPhraseTrimmer(rate, silenceDBFS, lead, phraseTailMs)
				var got []float32
				for off := 0; off < len(pcm); {
					n := 1 + rng.IntN(3000)
					got = append(got, tr.push(pcm[off:min(off+n, len(pcm))])...)
					off += n
				}
				got = append(got, tr.end()...)
				if len(want) == 0 {
					require.Empty(t, got, "%s seed %d lead %d", name, seed, lead)
					continue
				}
				require.Equal(t, want, got, "%s seed %d lead %d", name, seed, lead)
			}
		}
	}
}

// TestRemoteTTSStreamsPartialAudio: a remote TTS's phrase audio reaches the Sink while the
// upstream is still sending the phrase (its first piece carries the phrase's text, later pieces
// none), and resampled streaming equals resampling the phrase whole.
func TestRemoteTTSStreamsPartialAudio(t *testing.T) {
	t.Parallel()
	more := make(chan struct{})
	tone := func(n int) []byte {
		b := make([]byte, 2*n)
		for i := range n {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(int16(8000*math.Sin(float64(i)/5))))
		}
		return b
	}
	u := newUpstream(t, func(_ int, w http.ResponseWriter, r *http.Request, _ *upstream) {
		if r.URL.Path != "/v1/audio/speech" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "audio/pcm")
		_, _ = w.Write(tone(4800)) // 200 ms, then the rest only when the test says so
		w.(http.Flusher).Flush()
		select {
		case <-more:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write(tone(7200))
	})
	rc := u.cfg()

	t.Run("pieces reach the sink before the phrase ends", func(t *testing.T) {
		t.Parallel()
		p, _ := newTestPipeline(t, func(c *PipelineConfig) { c.Remote.TTS = &rc })
		sink := newRecSink(t)
		r, err := p.SubmitChat(context.Background(), ChatRequest{
			Messages: []ChatMessage{{Role: "user", Text: "hi"}}, MaxTokens: 6, WantAudio: true}, sink)
		require.NoError(t, err)
		require.True(t, sink.waitFor(20*time.Second, func(o []OutputMessage) bool { return len(ofKind(o, duplex.OutAudio)) > 0 }),
			"no audio while the upstream still sends the first phrase")
		outs, _, _ := sink.snapshot()
		first := ofKind(outs, duplex.OutAudio)[0]
		require.NotEmpty(t, first.Text, "the first piece carries the phrase's text")
		require.Less(t, len(first.Audio), 4800+1, "only what arrived so far")
		close(more)
		select {
		case <-r.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("chat did not finish")
		}
		outs, sms, _ := sink.snapshot()
		audio := ofKind(outs, duplex.OutAudio)
		require.Greater(t, len(audio), 1)
		var texts, frames int
		for _, o := range audio {
			if o.Text != "" {
				texts++
			}
			frames += len(o.Audio)
		}
		st := sms[len(sms)-1].Metrics
		require.Equal(t, 1, sms[len(sms)-1].StageID)
		require.Equal(t, texts, st.OutputUnitCount, "one unit per phrase, its text on its first piece")
		require.Equal(t, frames, st.AudioGeneratedFrames)
	})

	t.Run("streamed resampling equals whole", func(t *testing.T) {
		t.Parallel()
		full := newUpstream(t, func(_ int, w http.ResponseWriter, r *http.Request, _ *upstream) {
			_, _ = io.Copy(io.Discard, r.Body)
			for _, n := range []int{4800, 7200} { // two flushed writes: two reads at least
				_, _ = w.Write(tone(n))
				w.(http.Flusher).Flush()
			}
		})
		got, err := newRemoteTTS(full.cfg(), 16000).Synthesize(context.Background(), "hello")
		require.NoError(t, err)
		whole, err := audio.PCM16BytesToFloat32(nil, append(tone(4800), tone(7200)...))
		require.NoError(t, err)
		want, err := audio.Resample(whole, remoteSpeechRate, 16000)
		require.NoError(t, err)
		require.Len(t, got, len(want))
		require.InDeltaSlice(t, want, got, 1e-5)
	})
}
