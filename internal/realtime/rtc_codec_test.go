package realtime_test

import (
	"context"
	"encoding/binary"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/rtcclient"
)

// g711Peer is a pion peer whose media engine has only the given codec (a client without Opus):
// here, for an offer of a codec rtcclient does not make (G.722).
func g711Peer(t *testing.T, c webrtc.RTPCodecCapability, pt webrtc.PayloadType) *webrtc.PeerConnection {
	t.Helper()
	m := &webrtc.MediaEngine{}
	require.NoError(t, m.RegisterCodec(webrtc.RTPCodecParameters{RTPCodecCapability: c, PayloadType: pt}, webrtc.RTPCodecTypeAudio))
	pc, err := webrtc.NewAPI(webrtc.WithMediaEngine(m)).NewPeerConnection(webrtc.Configuration{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pc.Close() })
	return pc
}

// TestCallG711: a client that offers only PCMU (or PCMA) gets a call in that codec both ways: its
// speech is transcribed and the answer's audio comes back as G.711 RTP at 8 kHz; a client that
// offers no supported codec gets 400 invalid_sdp.
func TestCallG711(t *testing.T) {
	t.Parallel()
	s := newCallsServer(t)
	voice := goForward(t) // 24 kHz PCM16
	pcm24 := make([]int16, len(voice)/2)
	for i := range pcm24 {
		pcm24[i] = int16(binary.LittleEndian.Uint16(voice[2*i:]))
	}
	pcm24 = append(pcm24, make([]int16, 24000*3/2)...)
	f8, err := audio.Resample(audio.Int16ToFloat32(nil, pcm24), 24000, 8000)
	require.NoError(t, err)

	unsupported := g711Peer(t, webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeG722, ClockRate: 8000, Channels: 1}, 9)
	_, err = unsupported.AddTransceiverFromKind(webrtc.RTPCodecTypeAudio)
	require.NoError(t, err)
	offer, err := unsupported.CreateOffer(nil)
	require.NoError(t, err)
	resp, body := post(t, s.url, "application/sdp", offer.SDP)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
	require.Contains(t, string(body), "invalid_sdp")

	for _, tt := range []struct{ name, codec string }{{"PCMU", rtcclient.CodecPCMU}, {"PCMA", rtcclient.CodecPCMA}} {
		t.Run(tt.name, func(t *testing.T) {
			c := dialCall(t, s, rtcclient.Config{Key: "sk", Codec: tt.codec, MicRate: 8000})
			until := func(typ string, d time.Duration) rtcclient.Event {
				t.Helper()
				ev, err := c.WaitFor(context.Background(), typ, d)
				require.NoError(t, err)
				return ev
			}
			until("session.created", 20*time.Second)
			require.NoError(t, c.UpdateSession(map[string]any{"type": "realtime", "max_output_tokens": 6}))
			until("session.updated", 10*time.Second)
			micDone := c.StartSpeaking(audio.Float32ToInt16(nil, f8), time.Time{})
			tr := until("conversation.item.input_audio_transcription.completed", 60*time.Second)
			t.Logf("%s transcript: %q", tt.name, tr.M["transcript"])
			// 8 kHz telephone audio recognises worse than Opus wideband (measured: "help forward and
			// neutered" over PCMA, "a whore word that neutered" over PCMU), so only a transcript of
			// the utterance is required: the audio got through the G.711 decode.
			require.NotEmpty(t, strings.TrimSpace(tr.M["transcript"].(string)))
			until("output_audio_buffer.started", 60*time.Second)
			until("output_audio_buffer.stopped", 60*time.Second)
			st := c.Stats()
			require.Equal(t, tt.codec, strings.TrimPrefix(st.Codec, "audio/"))
			require.Greater(t, st.Packets, int64(10))
			// 20 ms of 8 kHz G.711 per packet (the resampler's first frame is a few samples short)
			require.InDelta(t, st.Packets*160, st.Bytes, 16)
			require.False(t, st.FirstAudible.IsZero(), "the answer decodes to audible G.711")
			t.Logf("%s answer: %d RTP packets", tt.name, st.Packets)
			require.NoError(t, <-micDone)
			require.NoError(t, c.Close())
		})
	}
	require.Eventually(t, func() bool { return s.calls.Active() == 0 && s.m.Active() == 0 }, 30*time.Second, 20*time.Millisecond)
}
