package rtcclient

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/speech"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// peer is the test's answering side: a pion peer behind a /v1/realtime/calls handler that
// checks what the client sends (the request, its events, its microphone) and plays a reply of
// 200 ms of silence then 400 ms of a tone, so that the first packet and the first audible
// packet differ.
type peer struct {
	t      *testing.T
	events chan protocol.ClientEvent

	mu        sync.Mutex
	pc        *webrtc.PeerConnection
	dc        *webrtc.DataChannel
	session   map[string]any // the multipart form's session
	micPkts   int
	micPCM    []int16 // decoded at 16 kHz
	toneAt    time.Time
	wg        sync.WaitGroup
	ctype     string
	hungUp    bool
	readerErr error
}

func newPeer(t *testing.T) (*peer, *httptest.Server) {
	p := &peer{t: t, events: make(chan protocol.ClientEvent, 64)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/realtime/calls", p.call)
	mux.HandleFunc("POST /v1/realtime/calls/rtc_test/hangup", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk" {
			http.Error(w, `{"error":{"type":"invalid_request_error","code":"invalid_api_key","message":"wrong key"}}`, http.StatusUnauthorized)
			return
		}
		p.mu.Lock()
		p.hungUp = true
		pc := p.pc
		p.mu.Unlock()
		_ = pc.Close()
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		p.mu.Lock()
		pc := p.pc
		p.mu.Unlock()
		if pc != nil {
			_ = pc.Close()
		}
		p.wg.Wait()
	})
	return p, srv
}

func (p *peer) call(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	ctype, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var offer []byte
	switch {
	case ctype == "application/sdp" && auth == "Bearer ek_good":
		offer, _ = io.ReadAll(r.Body)
	case ctype == "multipart/form-data" && auth == "Bearer sk":
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if err != nil {
				break
			}
			b, _ := io.ReadAll(part)
			switch part.FormName() {
			case "sdp":
				require.Equal(p.t, "application/sdp", part.Header.Get("Content-Type"))
				offer = b
			case "session":
				require.Equal(p.t, "application/json", part.Header.Get("Content-Type"))
				p.mu.Lock()
				require.NoError(p.t, json.Unmarshal(b, &p.session))
				p.mu.Unlock()
			}
		}
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","code":"invalid_api_key","param":null,"message":"Incorrect API key provided."}}`)
		return
	}
	p.mu.Lock()
	p.ctype = ctype
	p.mu.Unlock()
	pc, err := webrtc.NewPeerConnection(webrtc.Configuration{})
	require.NoError(p.t, err)
	out, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "audio", "peer")
	require.NoError(p.t, err)
	_, err = pc.AddTrack(out)
	require.NoError(p.t, err)
	p.mu.Lock()
	p.pc = pc
	p.mu.Unlock()
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		p.wg.Add(1)
		go p.readMic(tr)
	})
	pc.OnDataChannel(func(dc *webrtc.DataChannel) {
		require.Equal(p.t, "oai-events", dc.Label())
		p.mu.Lock()
		p.dc = dc
		p.mu.Unlock()
		dc.OnOpen(func() {
			_ = dc.SendText(`{"type":"session.created","event_id":"event_1","session":{"type":"realtime"}}`)
		})
		dc.OnMessage(func(m webrtc.DataChannelMessage) {
			ev, perr := protocol.DecodeClientEvent(m.Data)
			require.Nil(p.t, perr, "%s", m.Data)
			p.events <- ev
			if ev.Type() == "response.create" {
				p.wg.Add(1)
				go p.reply(out)
			}
		})
	})
	require.NoError(p.t, pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: string(offer)}))
	answer, err := pc.CreateAnswer(nil)
	require.NoError(p.t, err)
	gathered := webrtc.GatheringCompletePromise(pc)
	require.NoError(p.t, pc.SetLocalDescription(answer))
	<-gathered
	w.Header().Set("Content-Type", "application/sdp")
	w.Header().Set("Location", "/v1/realtime/calls/rtc_test")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, pc.LocalDescription().SDP)
}

func (p *peer) contentType() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ctype
}

func (p *peer) readMic(tr *webrtc.TrackRemote) {
	defer p.wg.Done()
	dec, err := speech.NewOpusDecoder(16000)
	require.NoError(p.t, err)
	defer dec.Close()
	pcm := make([]int16, dec.MaxFrameSamples())
	for {
		pkt, _, err := tr.ReadRTP()
		if err != nil {
			return
		}
		n, err := dec.Decode(pkt.Payload, pcm)
		p.mu.Lock()
		if err != nil {
			p.readerErr = err
		}
		p.micPkts++
		p.micPCM = append(p.micPCM, pcm[:n]...)
		p.mu.Unlock()
	}
}

// reply plays 10 frames of silence then 20 of a 440 Hz tone at −10 dBFS, paced at 20 ms.
func (p *peer) reply(out *webrtc.TrackLocalStaticSample) {
	defer p.wg.Done()
	enc, err := speech.NewOpusEncoder(48000, 64000)
	require.NoError(p.t, err)
	defer enc.Close()
	frame := enc.FrameSamples()
	pcm := make([]int16, frame)
	pkt := make([]byte, 1500)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for k := range 30 {
		<-tick.C
		for i := range pcm {
			pcm[i] = 0
			if k >= 10 {
				pcm[i] = int16(0.3 * 32767 * math.Sin(2*math.Pi*440*float64(k*frame+i)/48000))
			}
		}
		n, err := enc.Encode(pcm, pkt)
		require.NoError(p.t, err)
		if k == 10 {
			p.mu.Lock()
			p.toneAt = time.Now()
			p.mu.Unlock()
		}
		if out.WriteSample(media.Sample{Data: append([]byte(nil), pkt[:n]...), Duration: 20 * time.Millisecond}) != nil {
			return
		}
	}
}

func speechPCM(t *testing.T) []int16 {
	raw, err := os.ReadFile("/usr/share/pocketsphinx/test/data/goforward.raw") // 16 kHz PCM16
	require.NoError(t, err, "install pocketsphinx-testdata")
	pcm := make([]int16, len(raw)/2)
	for i := range pcm {
		pcm[i] = int16(binary.LittleEndian.Uint16(raw[2*i:]))
	}
	return pcm
}

func rms(pcm []int16) float64 {
	var s float64
	for _, v := range pcm {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s/float64(max(1, len(pcm)))) / 32768
}

// TestCall: a refused key is an HTTPError with OpenAI's message; an ek_ call gets
// session.created, its events reach the peer as the protocol's values, the reply's first
// audible sample is told apart from its first (silent) packet, the microphone arrives as the
// speech it was, and hangup closes the channel.
func TestCall(t *testing.T) {
	t.Parallel()
	p, srv := newPeer(t)
	ctx := context.Background()

	_, err := Dial(ctx, Config{BaseURL: srv.URL, Key: "ek_wrong"})
	var he *HTTPError
	require.ErrorAs(t, err, &he)
	require.Equal(t, http.StatusUnauthorized, he.Status)
	require.Equal(t, "invalid_api_key", he.Code)
	require.Equal(t, "Incorrect API key provided.", he.Message)

	c, err := Dial(ctx, Config{BaseURL: srv.URL, Key: "ek_good", MicRate: 16000})
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, "rtc_test", c.CallID())
	require.Equal(t, "application/sdp", p.contentType())
	created, err := c.WaitFor(ctx, "session.created", 10*time.Second)
	require.NoError(t, err)
	typed, err := created.Typed()
	require.NoError(t, err)
	require.IsType(t, protocol.SessionCreated{}, typed, "the protocol's server event type")

	sentAt := time.Now()
	create := &protocol.ResponseCreate{Header: protocol.Header{Kind: "response.create"}, MaxOutputTokens: ptr(6)}
	require.NoError(t, c.Send(create))
	require.Equal(t, create, <-p.events, "the peer decodes what was sent")
	require.Eventually(t, func() bool { return c.Stats().Packets >= 30 }, 10*time.Second, 10*time.Millisecond)
	st := c.Stats()
	require.Equal(t, "audio/opus", st.Codec)
	p.mu.Lock()
	toneAt := p.toneAt
	p.mu.Unlock()
	audible := c.FirstAudibleAfter(sentAt)
	require.False(t, audible.IsZero())
	require.Equal(t, st.FirstAudible, audible)
	require.Greater(t, audible.Sub(st.FirstPacket), 150*time.Millisecond, "ten silent frames come first")
	require.Less(t, audible.Sub(toneAt), 100*time.Millisecond, "the tone is audible as it arrives")
	require.Greater(t, audible.Sub(toneAt), -5*time.Millisecond)
	// None after the reply (a packet that arrived may still be playing now: a minute on).
	require.True(t, c.FirstAudibleAfter(time.Now().Add(time.Minute)).IsZero())

	voice := speechPCM(t)
	require.NoError(t, <-c.StartSpeaking(voice, time.Time{}))
	frames := (len(voice) + 319) / 320
	require.Eventually(t, func() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.micPkts == frames }, 5*time.Second, 10*time.Millisecond)
	p.mu.Lock()
	heard := rms(p.micPCM)
	require.NoError(t, p.readerErr)
	p.mu.Unlock()
	require.InEpsilon(t, rms(voice), heard, 0.3, "the microphone carries the speech: RMS %.4f sent, %.4f heard", rms(voice), heard)

	// A microphone fed frame by frame by its caller: one packet per Send, a short frame padded,
	// a longer one refused.
	mic, err := c.Microphone()
	require.NoError(t, err)
	require.Equal(t, 320, mic.FrameSamples())
	for k := range 3 {
		require.NoError(t, mic.Send(voice[k*320:(k+1)*320-k]))
		time.Sleep(20 * time.Millisecond)
	}
	require.ErrorContains(t, mic.Send(make([]int16, 321)), "321 samples, a frame is 320")
	mic.Close()
	require.Eventually(t, func() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.micPkts == frames+3 }, 5*time.Second, 10*time.Millisecond)

	var he2 *HTTPError
	require.ErrorAs(t, c.Hangup(ctx, "ek_good"), &he2, "the hangup takes the API key")
	require.NoError(t, c.Hangup(ctx, "sk"))
	select {
	case <-c.ChannelClosed():
	case <-time.After(10 * time.Second):
		t.Fatal("the data channel stayed open after the hangup")
	}
	require.NoError(t, c.Close())
	_, err = c.Next(ctx)
	require.Error(t, err)
}

// TestCallMultipart: with the API key the offer travels as multipart sdp + session, and a
// call without a microphone still receives audio; Speak refuses without one; Close ends a
// Speak in flight.
func TestCallMultipart(t *testing.T) {
	t.Parallel()
	p, srv := newPeer(t)
	ctx := context.Background()
	c, err := Dial(ctx, Config{BaseURL: srv.URL, Key: "sk", Session: json.RawMessage(`{"type":"realtime","instructions":"Be brief."}`)})
	require.NoError(t, err)
	require.Equal(t, "multipart/form-data", p.contentType())
	p.mu.Lock()
	require.Equal(t, map[string]any{"type": "realtime", "instructions": "Be brief."}, p.session)
	p.mu.Unlock()
	_, err = c.WaitFor(ctx, "session.created", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, c.SendJSON([]byte(`{"type":"response.create"}`)))
	require.Eventually(t, func() bool { return !c.FirstAudibleAfter(time.Time{}).IsZero() }, 10*time.Second, 10*time.Millisecond)
	require.ErrorContains(t, c.Speak(ctx, make([]int16, 320), time.Time{}), "no microphone")
	_, err = c.Microphone()
	require.ErrorContains(t, err, "no microphone")
	_, err = c.WaitFor(ctx, "never.sent", 50*time.Millisecond)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, c.Close())

	c2, err := Dial(ctx, Config{BaseURL: srv.URL, Key: "ek_good", MicRate: 16000})
	require.NoError(t, err)
	_, err = c2.WaitFor(ctx, "session.created", 10*time.Second)
	require.NoError(t, err)
	done := c2.StartSpeaking(make([]int16, 16000*60), time.Time{}) // a minute
	mic, err := c2.Microphone()
	require.NoError(t, err)
	defer mic.Close()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, c2.Close())
	require.ErrorContains(t, mic.Send(make([]int16, 320)), "closed", "a closed call's microphone sends nothing")
	require.Error(t, <-done, "Close ends the microphone")
	require.Error(t, <-c2.StartSpeaking(nil, time.Time{}), "a closed client does not speak")
}
