package media

import (
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pion/rtp"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/link"
)

// rtcFrameSamples is one 20 ms frame at the 48 kHz RTP clock of Opus.
const rtcFrameSamples = 960

// Errors of the player's input.
var (
	ErrUnsupportedFormat = errors.New("the session's output format cannot be played on a call")
	ErrPlayoutOverflow   = errors.New("the call's playout queue overflowed")
)

// maxPlayoutMs bounds the audio waiting to be played out on a call: the session sends at most
// its output lead ahead of real time, so more than this means a bug, and the call ends rather
// than grow without bound.
const maxPlayoutMs = 120_000

// EventSender is where the player's output_audio_buffer events go, as the connection core's
// outbound events (the call gives them to the data channel and every sideband).
type EventSender interface{ Send(ev link.Event) error }

// RTPWriter is where paced Opus packets go (the call's outbound track).
type RTPWriter interface{ WriteRTP(p *rtp.Packet) error }

// Player is a call's outbound audio: the session's audio deltas, decoded and re-framed into
// 20 ms frames at 48 kHz, encoded to Opus and written as RTP by one goroutine paced by the
// clock. It emits output_audio_buffer.started / .stopped / .cleared from what was actually
// written, and knows how much of each item was played (server-side truncation on barge-in).
type Player struct {
	st    EventSender
	out   RTPWriter
	codec Codec
	log   *zap.Logger

	mu       sync.Mutex
	pcm      []int16   // 48 kHz mono waiting to be framed
	queuedAt time.Time // when pcm last went from empty to not (the debug log's start of a spurt)
	respID   string    // the response whose audio is queued or playing ("" = none)
	itemID   string
	epoch    int
	minEpoch int
	playedMs int // of itemID, written to the wire
	// aheadUntil is the nominal end of the last frame written: frames are written up to
	// rtcSpurtLead ahead of their place in real time, and what lies past now has not played yet.
	aheadUntil time.Time
	started    bool // output_audio_buffer.started went out for respID
	doneResp   bool // response.done of respID has passed: the queue's end is the audio's end
	// cutItem / cutMs: the item a cancel's epoch fence cut, and how much of it was played, until
	// the client's output_audio_buffer.clear truncates it. The browser SDKs send response.cancel
	// and then output_audio_buffer.clear; the cancel usually clears the player first.
	cutItem string
	cutMs   int

	wake chan struct{}
}

// NewPlayer returns the player of a call whose track is out; Run writes it.
func NewPlayer(st EventSender, out RTPWriter, codec Codec, log *zap.Logger) *Player {
	return &Player{st: st, out: out, codec: codec, log: log, wake: make(chan struct{}, 1)}
}

// Delta takes one response.output_audio.delta event's audio (payload) of epoch.
func (p *Player) Delta(payload protocol.ServerEvent, epoch int) error {
	d, ok := payload.(protocol.ResponseOutputAudioDelta)
	if !ok {
		return fmt.Errorf("an audio delta without its payload: %T", payload)
	}
	data, err := base64.StdEncoding.DecodeString(d.Delta)
	if err != nil {
		return err
	}
	format, rate := d.Format, d.SampleRateHz
	var fl []float32
	switch format {
	case "g711_ulaw":
		fl, rate = audio.ULawToFloat32(nil, data), 8000
	case "g711_alaw":
		fl, rate = audio.ALawToFloat32(nil, data), 8000
	default: // pcm16 (pcm_f32le is not offered on calls; decoded as pcm16 it would be noise, so refused below)
		if format != "pcm16" {
			return ErrUnsupportedFormat
		}
		if fl, err = audio.PCM16BytesToFloat32(nil, data); err != nil {
			return err
		}
	}
	if rate != 48000 {
		if fl, err = audio.Resample(fl, rate, 48000); err != nil {
			return err
		}
	}
	respID, itemID := d.ResponseID, d.ItemID
	p.mu.Lock()
	defer p.mu.Unlock()
	if epoch < p.minEpoch {
		return nil // the response was cut
	}
	if respID != p.respID {
		p.respID, p.itemID, p.epoch, p.playedMs, p.started, p.doneResp = respID, itemID, epoch, 0, false, false
		p.cutItem, p.cutMs = "", 0
	}
	if len(p.pcm) == 0 {
		p.queuedAt = time.Now()
	}
	p.pcm = append(p.pcm, audio.Float32ToInt16(nil, fl)...) // after what is still queued
	if len(p.pcm) > maxPlayoutMs*48 {
		return ErrPlayoutOverflow
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return nil
}

// ResponseDone notes response.done: when the queue drains, the audio of that response ended.
func (p *Player) ResponseDone(respID string) {
	p.mu.Lock()
	if respID == p.respID {
		p.doneResp = true
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Clear drops the queued audio (barge-in, output_audio_buffer.clear, a stale epoch) and returns
// the item whose audio was cut and how much of it was played; it sends
// output_audio_buffer.cleared when there was audio. A clear by the client (minEpoch 0) after a
// cancel's fence already cut the audio returns the item that fence cut, without a second
// cleared event.
func (p *Player) Clear(minEpoch int) (itemID string, playedMs int, had bool) {
	p.mu.Lock()
	if minEpoch > p.minEpoch {
		p.minEpoch = minEpoch
	}
	had = p.respID != "" && (len(p.pcm) > 0 || p.started && !p.doneResp)
	respID := p.respID
	itemID, playedMs = p.itemID, p.playedMs
	// Only frames whose nominal time has come count as played: the last ones written ahead of it
	// (the pacer's lead) have not, and the truncation must not keep audio the user never heard.
	if ahead := time.Until(p.aheadUntil); ahead > 0 {
		playedMs = max(0, playedMs-int((ahead+time.Millisecond-1)/time.Millisecond))
	}
	p.pcm = p.pcm[:0]
	p.respID, p.started, p.doneResp = "", false, false
	switch {
	case had && minEpoch > 0:
		p.cutItem, p.cutMs = itemID, playedMs
	case !had && minEpoch == 0 && p.cutItem != "":
		itemID, playedMs = p.cutItem, p.cutMs
		p.cutItem, p.cutMs = "", 0
		p.mu.Unlock()
		return itemID, playedMs, true
	case minEpoch == 0:
		p.cutItem, p.cutMs = "", 0 // the client's clear cuts what plays now
	}
	p.mu.Unlock()
	if had {
		_ = p.st.Send(link.Event{Type: "output_audio_buffer.cleared", Payload: protocol.OutputAudioBufferCleared{ResponseID: &respID}})
	}
	return itemID, playedMs, had
}

// rtcSpurtLead is how far ahead of its place in real time a frame is written. A talk-spurt's
// first frames within it go out at once, the rest one per frame time: the browser's jitter
// buffer (Chromium's NetEq) then holds its target delay (about 35 ms on a LAN) from the first
// packet, instead of holding the spurt back until that much has arrived or stretching the first
// frames to build it, which is what made a reply start later over WebRTC than over a WebSocket.
// The session sends the audio ahead of real time anyway (MaxOutputLead); what the lead costs is
// at a barge-in, where up to this much written ahead still plays in the browser (which holds
// about as much in its jitter buffer anyway); the truncation counts as played only the frames
// whose nominal start has passed.
const rtcSpurtLead = 40 * time.Millisecond

// A long pause between talk-spurts is advanced on the RTP clock by rtcPauseCut less than it
// lasted. Over a pause the browser's jitter buffer (NetEq) conceals, and it plays the next spurt
// once the concealment has covered that spurt's timestamp leap, which keeps the playout delay of
// the reply before (its target, 55–105 ms on a loaded machine) for the next: a leap shorter than
// the concealment so far lets the first packet play as it arrives. Only pauses whose shortened
// leap still exceeds rtcPauseCutAbove: NetEq judges each packet's delay against those of the last
// 2 s of RTP time, and a packet that seems late against the last spurt's would raise its target.
const (
	rtcPauseCut      = 250 * time.Millisecond
	rtcPauseCutAbove = 2100 * time.Millisecond
)

// pacer places a call's outbound frames in time. Each frame has a nominal start: the end of the
// frame before it, or, when the queue had run dry and that end has passed, now (a new
// talk-spurt, with the marker bit). A frame may be written lead ahead of its nominal start, and
// the RTP timestamp follows the nominal starts, so a pause between spurts advances it by exactly
// the pause (a long one by rtcPauseCut less).
type pacer struct {
	frame   time.Duration // one frame's duration
	lead    time.Duration
	perTick uint32    // RTP timestamp units per frame
	clock   int       // RTP clock rate
	next    time.Time // nominal start of the next frame; zero before the first
	seq     uint16
	ts      uint32 // the next frame's RTP timestamp
}

func newPacer(c Codec, lead time.Duration) *pacer {
	return &pacer{frame: 20 * time.Millisecond, lead: lead, perTick: uint32(c.perTick), clock: c.clock}
}

// wait is how long from now until the next frame may be written (0: now). A spurt that has
// played out (next in the past) starts now.
func (p *pacer) wait(now time.Time) time.Duration {
	if p.next.IsZero() {
		return 0
	}
	return max(0, p.next.Sub(now)-p.lead)
}

// take returns the RTP header of the frame written at now and moves on to the next frame. dry
// says the queue ran dry since the last frame: if that frame has also played out, a new
// talk-spurt starts now. (A frame merely written late, the queue never having run dry, keeps the
// spurt's timeline: the browser's jitter buffer absorbs it.)
func (p *pacer) take(now time.Time, dry bool) (h rtp.Header, gap time.Duration) {
	spurt := p.next.IsZero()
	if !spurt && dry && now.After(p.next) {
		gap, spurt = now.Sub(p.next), true
		leap := gap
		if gap-rtcPauseCut > rtcPauseCutAbove {
			leap = gap - rtcPauseCut
		}
		p.ts += uint32(int64(leap) * int64(p.clock) / int64(time.Second))
		p.next = now
	}
	if p.next.IsZero() {
		p.next = now
	}
	h = rtp.Header{Version: 2, Marker: spurt, SequenceNumber: p.seq, Timestamp: p.ts}
	p.seq++
	p.ts += p.perTick
	p.next = p.next.Add(p.frame)
	return h, gap
}

// Run writes the queued audio one 20 ms frame at a time, each rtcSpurtLead ahead of its place
// in real time (pacer), until stop. Silence is not sent between talk-spurts; the marker bit
// starts each spurt and the timestamp advances across the gap, so the browser's jitter buffer
// is not reset per packet.
func (p *Player) Run(stop <-chan struct{}) {
	enc, err := p.codec.newEncoder()
	if err != nil {
		p.log.Error("audio encoder", zap.Error(err))
		return
	}
	defer enc.Close()
	frame := make([]int16, rtcFrameSamples)
	pkt := make([]byte, 1500)
	pace := newPacer(p.codec, rtcSpurtLead)
	dry := true
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		p.mu.Lock()
		n, queuedAt := len(p.pcm), p.queuedAt
		p.mu.Unlock()
		if n == 0 {
			p.maybeStopped()
			dry = true
			select {
			case <-stop:
				return
			case <-p.wake:
				continue
			}
		}
		if d := pace.wait(time.Now()); d > 0 {
			timer.Reset(d)
			select {
			case <-stop:
				return
			case <-timer.C:
			}
			continue // the queue may have been cleared meanwhile
		}
		p.mu.Lock()
		if len(p.pcm) == 0 {
			p.mu.Unlock()
			continue
		}
		k := copy(frame, p.pcm)
		clear(frame[k:]) // the last frame of a response is padded with silence
		p.pcm = append(p.pcm[:0], p.pcm[k:]...)
		first := !p.started
		p.started = true
		respID := p.respID
		p.playedMs += k / 48
		// The frame's place in time is taken with its audio, so clear never sees the one
		// without the other.
		now := time.Now()
		h, gap := pace.take(now, dry)
		dry = false
		p.aheadUntil = pace.next
		p.mu.Unlock()
		if first {
			_ = p.st.Send(link.Event{Type: "output_audio_buffer.started", Payload: protocol.OutputAudioBufferStarted{ResponseID: respID}})
		}
		m, err := enc.Encode(frame, pkt)
		if err != nil {
			p.log.Warn("audio encode", zap.Error(err))
			continue
		}
		if h.Marker {
			// Where a reply's time goes on the server: audio queued → its first packet written.
			p.log.Debug("rtp talk-spurt", zap.String("response_id", respID), zap.Duration("queued_to_first_packet", now.Sub(queuedAt)),
				zap.Duration("gap", gap), zap.Int("queued_ms", n/48))
		}
		if err := p.out.WriteRTP(&rtp.Packet{Header: h, Payload: pkt[:m]}); err != nil {
			p.log.Debug("rtp write", zap.Error(err))
		}
	}
}

// maybeStopped sends output_audio_buffer.stopped once the finished response's audio is out.
func (p *Player) maybeStopped() {
	p.mu.Lock()
	if !p.started || !p.doneResp || len(p.pcm) > 0 {
		p.mu.Unlock()
		return
	}
	respID := p.respID
	p.respID, p.started, p.doneResp = "", false, false
	p.mu.Unlock()
	_ = p.st.Send(link.Event{Type: "output_audio_buffer.stopped", Payload: protocol.OutputAudioBufferStopped{ResponseID: respID}})
}
