package latency

// Conversations over WebRTC calls (--webrtc-share): the same user as on the WebSocket, on a call
// made as bench latency's WebRTC scenarios make theirs (rtcCall: POST /v1/realtime/calls). The
// microphone goes out as 20 ms Opus frames, each at the microphone clock's time of its first
// sample; the reply is the call's Opus RTP decoded on receipt and placed on the client's
// playback clock (a packet plays from its arrival, or after the one before while that still
// plays), so first audible and old audio stops are heard there, not read from events.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/omniserve/omniserve/internal/rtcclient"
)

// rtcCount is how many of a step's n conversations are calls: share of n, rounded, at least one
// when share > 0.
func rtcCount(n int, share float64) int {
	if share <= 0 {
		return 0
	}
	return min(n, max(1, int(math.Round(share*float64(n)))))
}

// isRTC reports whether conversation i of n is one of the k calls: spread evenly over the step,
// whose conversations start spread over its first second.
func isRTC(i, n, k int) bool { return (i+1)*k/n > i*k/n }

// rtcConvSession is the WebSocket conversation's session (dial, dialConversation) as a call's.
func rtcConvSession(silenceMs, replyTokens int) map[string]any {
	s := rtcSession(0, serverVAD(silenceMs))
	s["max_output_tokens"] = replyTokens
	s["audio"] = map[string]any{"input": map[string]any{
		"turn_detection": serverVAD(silenceMs),
		"transcription":  map[string]any{"model": "gpt-4o-transcribe", "language": "en"},
	}}
	return s
}

// micUnit is one 100 ms unit of the microphone and the time of its first sample.
type micUnit struct {
	due time.Time
	pcm []int16
}

// rtcConv is one conversation's call. Its goroutines (the paced microphone, the data channel's
// reader and the watch on the channel's end) are owned by close, which cancels and waits for
// them before closing the call.
type rtcConv struct {
	cl     *rtcclient.Client
	out    chan convEvent
	units  chan micUnit
	cancel context.CancelFunc
	wg     sync.WaitGroup

	micDone chan struct{} // the microphone stopped (failed, or close)
	failure atomic.Pointer[error]

	lateMu sync.Mutex
	late   []float64 // each unit's last frame: ms after its time on the microphone's clock
}

func dialRTCConv(ctx context.Context, base, key string, silenceMs, replyTokens int) (*rtcConv, error) {
	cl, err := rtcCall(ctx, base, key, rtcConvSession(silenceMs, replyTokens))
	if err != nil {
		return nil, err
	}
	mic, err := cl.Microphone()
	if err != nil {
		_ = cl.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	ectx, ecancel := context.WithCancel(rctx)
	t := &rtcConv{cl: cl, out: make(chan convEvent, 1024), units: make(chan micUnit, 8), cancel: cancel,
		micDone: make(chan struct{})}
	cl.OnAudio(t.onPacket)
	t.wg.Add(3)
	go t.speak(rctx, mic)
	go t.readEvents(ectx)
	go func() {
		// Next does not end when the server hangs up; the events end with the data channel.
		defer t.wg.Done()
		defer ecancel()
		select {
		case <-cl.ChannelClosed():
		case <-rctx.Done():
		}
	}()
	return t, nil
}

// fail keeps the first reason the call can no longer be heard or spoken to.
func (t *rtcConv) fail(err error) { t.failure.CompareAndSwap(nil, &err) }

func (t *rtcConv) failed() error {
	if p := t.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// onPacket is the call's audio callback (on its RTP reader, under its lock): short, never
// blocking. A packet that finds the queue full fails the conversation rather than being lost
// unheard.
func (t *rtcConv) onPacket(pk rtcclient.Packet) {
	if pk.PCM == nil {
		t.fail(errors.New("a packet of the reply's RTP could not be decoded"))
		return
	}
	pcm := make([]float32, len(pk.PCM))
	for i, v := range pk.PCM {
		pcm[i] = float32(v) / 32768
	}
	select {
	case t.out <- convEvent{kind: "audio", at: pk.At, pcm: pcm}:
	default:
		t.fail(errors.New("an RTP packet of the reply found the conversation's event queue full"))
	}
}

// readEvents turns the data channel's events into the conversation's until they end.
func (t *rtcConv) readEvents(ctx context.Context) {
	defer t.wg.Done()
	defer close(t.out)
	defer t.cl.OnAudio(nil) // no packet is queued on out once it is closed
	for {
		ev, err := t.cl.Next(ctx)
		if err != nil {
			return
		}
		ce, ok := rtcConvEvent(ev)
		if !ok {
			continue
		}
		select {
		case t.out <- ce:
		case <-ctx.Done():
			return
		}
	}
}

// rtcConvEvent is what a conversation needs of a call's event. The reply has played out at
// output_audio_buffer.stopped (the server's RTP of it is all sent); response ids are not
// needed: the call carries no audio but the one it plays.
func rtcConvEvent(ev rtcclient.Event) (convEvent, bool) {
	ce := convEvent{at: ev.At}
	switch ev.Type {
	case "error":
		ce.kind, ce.text = "error", string(ev.Data)
	case "conversation.item.input_audio_transcription.completed":
		ce.kind, ce.text = "transcript", fmt.Sprint(ev.M["transcript"])
	case "output_audio_buffer.cleared":
		ce.kind = "cleared"
	case "output_audio_buffer.stopped":
		ce.kind = "done"
	default:
		return ce, false
	}
	return ce, true
}

// speak sends each unit as 20 ms frames, frame k at the unit's due time + k·20 ms, as a browser's
// microphone sends them.
func (t *rtcConv) speak(ctx context.Context, mic *rtcclient.Microphone) {
	defer t.wg.Done()
	defer close(t.micDone)
	defer mic.Close()
	frame := mic.FrameSamples()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		var u micUnit
		select {
		case u = <-t.units:
		case <-ctx.Done():
			return
		}
		var due time.Time
		for k, i := 0, 0; i < len(u.pcm); k, i = k+1, i+frame {
			due = u.due.Add(time.Duration(k) * time.Second * time.Duration(frame) / inRate)
			if d := time.Until(due); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-ctx.Done():
					return
				}
			}
			if err := mic.Send(u.pcm[i:min(i+frame, len(u.pcm))]); err != nil {
				t.fail(fmt.Errorf("webrtc microphone: %w", err))
				return
			}
		}
		t.lateMu.Lock()
		t.late = append(t.late, ms(time.Since(due)))
		t.lateMu.Unlock()
	}
}

func (t *rtcConv) events() <-chan convEvent { return t.out }

func (t *rtcConv) appendAudio(ctx context.Context, pcm []float32, due time.Time) error {
	if err := t.failed(); err != nil {
		return err
	}
	select {
	case t.units <- micUnit{due: due, pcm: pcm16(pcm)}:
		return nil
	case <-t.micDone:
		if err := t.failed(); err != nil {
			return err
		}
		return errors.New("webrtc microphone stopped")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// frameLate is each unit's last frame's lateness on the microphone's clock (ms); after close.
func (t *rtcConv) frameLate() []float64 {
	t.lateMu.Lock()
	defer t.lateMu.Unlock()
	return t.late
}

func (t *rtcConv) close() {
	t.cancel()
	t.wg.Wait()
	_ = t.cl.Close()
}
