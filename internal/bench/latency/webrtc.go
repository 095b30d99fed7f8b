package latency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/benchreport"
	"github.com/omniserve/omniserve/internal/rtcclient"
)

// The WebRTC scenarios: the same turns as the WebSocket ones, on a call (POST
// /v1/realtime/calls, the multipart form with the session, as an app's backend makes it): the
// speech as 20 ms Opus frames paced by the clock, the reply as Opus RTP decoded on receipt. A
// reply's first audible sample sounds when the RTP packet holding it arrives (the server paces
// RTP in real time), plus its offset in the packet; a browser's jitter buffer would add its own
// delay on top, which no server can remove.

// rtcSession is the session object a bench call is made with.
func rtcSession(tools int, turnDetection any) map[string]any {
	s := map[string]any{"type": "realtime", "output_modalities": []string{"audio"},
		"audio":             map[string]any{"input": map[string]any{"turn_detection": turnDetection}},
		"max_output_tokens": 24}
	if tools > 0 {
		s["tools"], s["tool_choice"] = benchTools(tools), "auto"
	}
	if turnDetection != nil {
		s["extra_body"] = map[string]any{"auto_response": true}
	}
	return s
}

// rtcCall dials a call made with session and waits for session.created.
func rtcCall(ctx context.Context, base, key string, session map[string]any) (*rtcclient.Client, error) {
	b, err := json.Marshal(session)
	if err != nil {
		return nil, fmt.Errorf("webrtc call: %w", err)
	}
	c, err := rtcclient.Dial(ctx, rtcclient.Config{BaseURL: base, Key: key, Session: b,
		MicRate: inRate, OutRate: outRate, Audible: audibleT})
	if err != nil {
		return nil, fmt.Errorf("webrtc call: %w", err)
	}
	if _, err := c.WaitFor(ctx, "session.created", 30*time.Second); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

func pcm16(pcm []float32) []int16 {
	out := make([]int16, len(pcm))
	for i, v := range pcm {
		out[i] = int16(max(-1, min(1, v)) * 32767)
	}
	return out
}

// rtcPlayback collects the reply's packets after from as playback spans for the timeline: a
// gap of more than two packets starts a new span.
type rtcPlayback struct {
	spans [][2]time.Time
}

func (p *rtcPlayback) add(pk rtcclient.Packet) {
	end := pk.At.Add(time.Duration(len(pk.PCM)) * time.Second / outRate)
	if k := len(p.spans) - 1; k >= 0 && pk.At.Sub(p.spans[k][1]) < 40*time.Millisecond {
		p.spans[k][1] = end
		return
	}
	p.spans = append(p.spans, [2]time.Time{pk.At, end})
}

// waitReply reads the call's events until the reply has played out (output_audio_buffer.stopped
// after response.done), noting when the user's transcript arrived.
func waitReply(ctx context.Context, c *rtcclient.Client, t0 time.Time) (transcript float64, err error) {
	deadline := time.Now().Add(60 * time.Second)
	done := false
	for {
		ectx, cancel := context.WithDeadline(ctx, deadline)
		ev, err := c.Next(ectx)
		cancel()
		if err != nil {
			return transcript, fmt.Errorf("waiting for the reply (events %v): %w", c.Seen()[max(0, len(c.Seen())-10):], err)
		}
		switch ev.Type {
		case "error":
			return transcript, fmt.Errorf("server error: %s", ev.Data)
		case "conversation.item.input_audio_transcription.completed":
			if transcript == 0 {
				transcript = ms(ev.At.Sub(t0))
			}
		case "response.done":
			done = true
		case "output_audio_buffer.stopped", "output_audio_buffer.cleared":
			if done {
				return transcript, nil
			}
		}
	}
}

// rtcManualTurns is manualTurns on a call: speech, then commit and response.create on the data
// channel; commit → first audible sample, first packet, transcript.
func rtcManualTurns(ctx context.Context, base, key string, tools int, speech []float32, turns int, tl *timeline) []manualResult {
	out := make([]manualResult, turns)
	c, err := rtcCall(ctx, base, key, rtcSession(tools, nil))
	if err != nil {
		out[0].err = err
		return out[:1]
	}
	defer c.Close()
	var pb rtcPlayback
	c.OnAudio(pb.add)
	voice := pcm16(speech)
	from, to := voiced(speech)
	for t := range turns {
		r := &out[t]
		start := time.Now().Add(20 * time.Millisecond)
		if r.err = c.Speak(ctx, voice, start); r.err != nil {
			return out[:t+1]
		}
		tl.interval(benchreport.UserSpeech, dueAt(start, from), dueAt(start, to), fmt.Sprintf("turn %d", t+1))
		// The last frame is sent at its due time and holds 20 ms of audio.
		time.Sleep(time.Until(dueAt(start, len(voice)+inRate/50)))
		t0 := time.Now()
		if r.err = c.SendJSON([]byte(`{"type":"input_audio_buffer.commit"}`)); r.err != nil {
			return out[:t+1]
		}
		if r.err = c.SendJSON([]byte(`{"type":"response.create"}`)); r.err != nil {
			return out[:t+1]
		}
		r.transcript, r.err = waitReply(ctx, c, t0)
		if r.err != nil {
			return out[:t+1]
		}
		audible := c.FirstAudibleAfter(t0)
		if audible.IsZero() {
			r.err = errors.New("the reply had no audible audio")
			return out[:t+1]
		}
		r.audible = ms(audible.Sub(t0))
		r.firstDelta = ms(c.FirstPacketAfter(t0).Sub(t0))
	}
	c.OnAudio(nil)
	for _, sp := range pb.spans {
		tl.interval(benchreport.AssistantAudio, sp[0], sp[1], "reply")
	}
	return out
}

// rtcVADTurn is vadTurn on a call: speech then 2 s of silence under server VAD; end of speech
// → first audible sample of the reply.
func rtcVADTurn(ctx context.Context, base, key string, tools int, speech []float32, silenceMs int, tl *timeline) (float64, error) {
	c, err := rtcCall(ctx, base, key, rtcSession(tools, serverVAD(silenceMs)))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	var pb rtcPlayback
	c.OnAudio(pb.add)
	defer c.OnAudio(nil)
	voice := pcm16(append(append([]float32(nil), speech...), make([]float32, 2*inRate)...))
	start := time.Now().Add(20 * time.Millisecond)
	spoke := c.StartSpeaking(voice, start)
	end := dueAt(start, lastVoiced(speech))
	_, err = waitReply(ctx, c, start)
	if serr := <-spoke; err == nil {
		err = serr
	}
	from, to := voiced(speech)
	tl.interval(benchreport.UserSpeech, dueAt(start, from), dueAt(start, to), "the user's turn")
	c.OnAudio(nil)
	for _, sp := range pb.spans {
		tl.interval(benchreport.AssistantAudio, sp[0], sp[1], "reply")
	}
	if err != nil {
		return 0, err
	}
	audible := c.FirstAudibleAfter(end)
	if audible.IsZero() {
		return 0, errors.New("the reply had no audible audio")
	}
	return ms(audible.Sub(end)), nil
}

// diffP50 is the p50 of a minus the p50 of b, as one figure (ms).
func diffP50(name, definition string, a, b []float64) bench.Figure {
	return bench.One(name, "ms", definition, benchreport.Quantile(a, 50)-benchreport.Quantile(b, 50), 1)
}
