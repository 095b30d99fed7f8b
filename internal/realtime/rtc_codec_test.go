package realtime_test

import (
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
)

// g711Peer is a pion peer whose media engine has only the given codec (a client without Opus).
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

	for _, tt := range []struct {
		name string
		c    webrtc.RTPCodecCapability
		pt   webrtc.PayloadType
		enc  func([]byte, []float32) []byte
	}{
		{"PCMU", webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypePCMU, ClockRate: 8000, Channels: 1}, 0, audio.Float32ToULaw},
		{"PCMA", webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypePCMA, ClockRate: 8000, Channels: 1}, 8, audio.Float32ToALaw},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pc := g711Peer(t, tt.c, tt.pt)
			mic, err := webrtc.NewTrackLocalStaticSample(tt.c, "mic", "test")
			require.NoError(t, err)
			_, err = pc.AddTrack(mic)
			require.NoError(t, err)
			dc, err := pc.CreateDataChannel("oai-events", nil)
			require.NoError(t, err)
			events := make(chan map[string]any, 4096)
			dc.OnMessage(func(m webrtc.DataChannelMessage) {
				var ev map[string]any
				if json.Unmarshal(m.Data, &ev) == nil {
					select {
					case events <- ev:
					default:
					}
				}
			})
			var packets, payloadBytes atomic.Int64
			var codec atomic.Value
			var readers sync.WaitGroup
			pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
				codec.Store(tr.Codec().MimeType)
				readers.Add(1)
				go func() {
					defer readers.Done()
					for {
						p, _, err := tr.ReadRTP()
						if err != nil {
							return
						}
						packets.Add(1)
						payloadBytes.Add(int64(len(p.Payload)))
					}
				}()
			})
			offer, err := pc.CreateOffer(nil)
			require.NoError(t, err)
			require.NoError(t, pc.SetLocalDescription(offer))
			resp, answer := post(t, s.url, "application/sdp", offer.SDP)
			require.Equal(t, http.StatusCreated, resp.StatusCode, string(answer))
			require.NoError(t, pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: string(answer)}))
			until := func(typ string, d time.Duration) map[string]any {
				t.Helper()
				deadline := time.After(d)
				for {
					select {
					case ev := <-events:
						if ev["type"] == typ {
							return ev
						}
					case <-deadline:
						t.Fatalf("no %s within %v", typ, d)
					}
				}
			}
			until("session.created", 20*time.Second)
			require.NoError(t, dc.SendText(`{"type":"session.update","session":{"type":"realtime","max_output_tokens":6}}`))
			until("session.updated", 10*time.Second)
			micDone := make(chan struct{})
			go func() {
				defer close(micDone)
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for i := 0; i+160 <= len(f8); i += 160 {
					<-tick.C
					if mic.WriteSample(media.Sample{Data: tt.enc(nil, f8[i:i+160]), Duration: 20 * time.Millisecond}) != nil {
						return
					}
				}
			}()
			tr := until("conversation.item.input_audio_transcription.completed", 60*time.Second)
			t.Logf("%s transcript: %q", tt.name, tr["transcript"])
			// 8 kHz telephone audio recognises worse than Opus wideband (measured: "help forward and
			// neutered" over PCMA, "a whore word that neutered" over PCMU), so only a transcript of
			// the utterance is required: the audio got through the G.711 decode.
			require.NotEmpty(t, strings.TrimSpace(tr["transcript"].(string)))
			until("output_audio_buffer.started", 60*time.Second)
			until("output_audio_buffer.stopped", 60*time.Second)
			require.Equal(t, strings.ToLower(tt.c.MimeType), strings.ToLower(codec.Load().(string)))
			require.Greater(t, packets.Load(), int64(10))
			// 20 ms of 8 kHz G.711 per packet (the resampler's first frame is a few samples short)
			require.InDelta(t, packets.Load()*160, payloadBytes.Load(), 16)
			t.Logf("%s answer: %d RTP packets", tt.name, packets.Load())
			<-micDone
			require.NoError(t, pc.Close())
			readers.Wait()
		})
	}
	require.Eventually(t, func() bool { return s.calls.Active() == 0 && s.m.Active() == 0 }, 30*time.Second, 20*time.Millisecond)
}
