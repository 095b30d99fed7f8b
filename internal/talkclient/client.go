// Package talkclient is a terminal client of the realtime WebSocket (OpenAI Realtime GA events):
// it streams speech in, prints the transcripts as they stream and a timing line per assistant
// turn, and collects the reply audio. `omniserve talk` is a thin wrapper around Run.
//
// It is a client only: it imports nothing of the server, and no cgo.
package talkclient

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/omniserve/omniserve/internal/protocol"
)

// Modes of turn-taking.
const (
	// ModeManual commits the input and asks for a response (turn_detection null).
	ModeManual = "manual"
	// ModeVAD lets the server's voice activity detection end the turn, respond and barge in
	// (turn_detection server_vad with create_response and interrupt_response).
	ModeVAD = "vad"
)

// Options configure one conversation. Zero values take the documented defaults.
type Options struct {
	// URL is the realtime endpoint, e.g. ws://localhost:8000/v1/realtime. Required. In VAD mode
	// duplex=1 is added to the query when it is not there.
	URL string
	// APIKey is sent as "Authorization: Bearer <key>" when set.
	APIKey string
	// Mode is ModeManual (default) or ModeVAD.
	Mode string
	// Fast sends the input as fast as the socket takes it; default is real-time pace.
	Fast bool
	// BargeInAt, when positive, speaks the input again over the first reply with audio once
	// that much of its audio has arrived: the server's VAD cancels the reply (VAD mode), or the client
	// cancels it and truncates the item to what was heard (manual mode).
	BargeInAt time.Duration
	// MaxOutputTokens bounds each response; 0 leaves the server's default ("inf").
	MaxOutputTokens int
	// ChunkMs is the length of one input_audio_buffer.append. Default 40.
	ChunkMs int
	// TrailingSilence is appended to the input in VAD mode so the server hears the end of the
	// turn. Default 1 s.
	TrailingSilence time.Duration
	// Linger is how long VAD mode waits after the last response for another one. Default 1.5 s.
	Linger time.Duration
	// Timeout bounds the whole conversation. Default 2 min.
	Timeout time.Duration
	// Out receives the transcripts and the per-turn timing lines. Nil discards them.
	Out io.Writer
	// OnAudio, when set, is given each assistant audio chunk (24 kHz mono) as it arrives.
	OnAudio func(pcm []int16)
}

func (o Options) withDefaults() Options {
	if o.Mode == "" {
		o.Mode = ModeManual
	}
	if o.ChunkMs <= 0 {
		o.ChunkMs = 40
	}
	if o.TrailingSilence <= 0 {
		o.TrailingSilence = time.Second
	}
	if o.Linger <= 0 {
		o.Linger = 1500 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return o
}

// Turn is one assistant response as the client saw it.
type Turn struct {
	N          int
	ResponseID string
	// Status is response.done's status (completed, cancelled, incomplete, failed); Reason its
	// status_details.reason ("" when completed).
	Status, Reason string
	// User is the transcript of the input this response answers, when it arrived before the
	// response ended. Assistant is the reply's transcript.
	User, Assistant string
	// InputEnd is when the user's turn ended as the client knows it: the commit (manual) or
	// speech_stopped (VAD; the last append when there was none).
	InputEnd, Created, FirstAudio, Done time.Time
	AudioMs                             float64

	item string // the assistant item, from the first audio delta
}

func (t *Turn) itemID() string { return t.item }

// FirstAudioLatency is input end → first audio delta, or 0 when the reply had no audio.
func (t Turn) FirstAudioLatency() time.Duration {
	if t.FirstAudio.IsZero() || t.InputEnd.IsZero() {
		return 0
	}
	return t.FirstAudio.Sub(t.InputEnd)
}

// Line is the turn's timing line.
func (t Turn) Line() string {
	reason := t.Reason
	if reason == "" {
		reason = "-"
	}
	first := "no audio"
	if !t.FirstAudio.IsZero() && !t.InputEnd.IsZero() {
		first = fmt.Sprintf("%d ms", t.FirstAudioLatency().Milliseconds())
	}
	var total string
	if !t.InputEnd.IsZero() {
		total = fmt.Sprintf(", input end → done %d ms", t.Done.Sub(t.InputEnd).Milliseconds())
	}
	return fmt.Sprintf("turn %d: %s (reason %s) input end → first audio %s%s, audio %.2f s, %s",
		t.N, t.Status, reason, first, total, t.AudioMs/1000, t.ResponseID)
}

// Result is what one conversation produced.
type Result struct {
	Turns []Turn
	// Reply is every assistant audio sample received, 24 kHz mono, in arrival order.
	Reply []int16
	// UserTranscripts are the input transcripts in arrival order.
	UserTranscripts []string
	// Warnings are error events that did not end the conversation (a cancel or truncate race).
	Warnings []*ServerError
	// Resumes counts the dropped connections the session was resumed over.
	Resumes int
	// NewSessions counts sessions started again because the server no longer had the
	// session after a drop (session_not_found); the conversation then starts over.
	NewSessions int
}

// ServerError is a Realtime error event.
type ServerError struct {
	Type, Code, Message, Param, EventID string
}

func (e *ServerError) Error() string {
	s := "server error " + e.Code + ": " + e.Message
	if e.Param != "" {
		s += " (param " + e.Param + ")"
	}
	return s
}

// DialError is a refused connection: a network error, or an HTTP answer instead of the upgrade
// (401 bad API key, 503 no session slot or not ready).
type DialError struct {
	URL     string
	Status  int    // 0 for a network error
	Message string // the server's error message, when it sent one
	Err     error
}

func (e *DialError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("connecting to %s: %v", e.URL, e.Err)
	}
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("connecting to %s: server answered %d %s: %s", e.URL, e.Status, http.StatusText(e.Status), msg)
}

func (e *DialError) Unwrap() error { return e.Err }

// ErrTimeout is returned when the conversation did not finish within Options.Timeout.
var ErrTimeout = errors.New("the conversation did not finish in time")

// endpoint builds the URL to dial.
func endpoint(o Options) (string, error) {
	u, err := url.Parse(o.URL)
	if err != nil {
		return "", fmt.Errorf("parsing --url: %w", err)
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	case "ws", "wss":
	default:
		return "", fmt.Errorf("--url must be ws://, wss://, http:// or https://, got %q", o.URL)
	}
	if o.Mode == ModeVAD {
		q := u.Query()
		if q.Get("duplex") == "" {
			q.Set("duplex", "1")
			u.RawQuery = q.Encode()
		}
	}
	return u.String(), nil
}

// ValidateOptions reports a usage error in o without connecting.
func ValidateOptions(o Options) error {
	o = o.withDefaults()
	if o.Mode != ModeManual && o.Mode != ModeVAD {
		return fmt.Errorf("--mode must be %s or %s, got %q", ModeManual, ModeVAD, o.Mode)
	}
	if o.URL == "" {
		return errors.New("--url is required")
	}
	_, err := endpoint(o)
	return err
}

// Run holds one conversation: it connects, configures the session, speaks input (24 kHz mono
// pcm16) and returns when the replies are over. A refused connection is a *DialError, an error
// event that ends the conversation a *ServerError.
func Run(ctx context.Context, o Options, input []int16) (*Result, error) {
	o = o.withDefaults()
	if err := ValidateOptions(o); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, o.Timeout, ErrTimeout)
	defer cancel()
	res, err := runOnce(ctx, o, input)
	if errors.Is(err, ErrSessionLost) {
		// The server no longer has the session: only now is a new one started, and the
		// conversation is had again from the start.
		fmt.Fprintf(o.Out, "\nsession lost (%v): starting a new session\n", err)
		var again *Result
		again, err = runOnce(ctx, o, input)
		again.Resumes += res.Resumes
		again.NewSessions = res.NewSessions + 1
		res = again
	}
	if errors.Is(context.Cause(ctx), ErrTimeout) && err != nil && !isServerError(err) {
		err = fmt.Errorf("%w (%s)", ErrTimeout, o.Timeout)
	}
	return res, err
}

// runOnce has one conversation on one session, resuming it across dropped connections.
func runOnce(ctx context.Context, o Options, input []int16) (*Result, error) {
	u, _ := endpoint(o)
	hdr := http.Header{}
	if o.APIKey != "" {
		hdr.Set("Authorization", "Bearer "+o.APIKey)
	}
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		return &Result{}, dialError(u, resp, err)
	}
	ws.SetReadLimit(64 << 20)

	l := newLink(o, u, hdr, ws)
	c := &conv{o: o, link: l, input: input, res: &Result{}, events: l.events}
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	readerDone := make(chan error, 1)
	go func() { readerDone <- l.readLoop(readCtx) }()
	err = c.run(ctx)
	if err == nil {
		l.close(websocket.StatusNormalClosure, "done")
	} else {
		l.close(0, "")
	}
	// After the close handshake (which the read loop's Read completes): a read loop waiting
	// between redials stops too.
	stopReading()
	readErr := <-readerDone
	if err != nil && errors.Is(readErr, ErrSessionLost) {
		err = readErr
	}
	return c.res, err
}

func isServerError(err error) bool {
	var se *ServerError
	return errors.As(err, &se)
}

func dialError(u string, resp *http.Response, err error) error {
	de := &DialError{URL: u, Err: err}
	if resp != nil {
		de.Status = resp.StatusCode
		if resp.Body != nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			_ = resp.Body.Close()
			var e struct {
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal(b, &e) == nil {
				de.Message = e.Error.Message
			}
		}
	}
	return de
}

// serverEvent is one decoded server event (its protocol type, in either dialect) and when it
// arrived.
type serverEvent struct {
	ev  protocol.ServerEvent
	env protocol.Envelope
	at  time.Time
}

func decodeEvent(b []byte) (serverEvent, error) {
	ev, env, err := protocol.DecodeServerEvent(b)
	return serverEvent{ev: ev, env: env, at: time.Now()}, err
}

// conv is the state of one conversation. Only run's goroutine touches it, except the socket
// writes (coder/websocket allows concurrent writers) and events, fed by readLoop.
type conv struct {
	o      Options
	link   *link
	input  []int16
	res    *Result
	events chan serverEvent

	// client event ids of cancels and truncates: errors answering them are races, not failures
	tolerated map[string]bool

	turns     map[string]*Turn // by response id
	active    *Turn
	expected  int // responses the conversation waits for
	inputEnd  time.Time
	lastSent  time.Time
	users     []string // transcripts not yet attached to a turn
	bargeDone bool
	streaming bool
	lineOpen  bool // an "assistant:" line is being written
}

func newEventID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "evt_talk_" + hex.EncodeToString(b[:])
}

// send writes one client event and returns its event_id.
func (c *conv) send(ctx context.Context, ev map[string]any) (string, error) {
	id := newEventID()
	ev["event_id"] = id
	b, err := json.Marshal(ev)
	if err != nil {
		return "", fmt.Errorf("encoding %v: %w", ev["type"], err)
	}
	if err := c.link.write(ctx, b); err != nil {
		return "", fmt.Errorf("sending %v: %w", ev["type"], err)
	}
	return id, nil
}

// sessionConfig is the session.update payload: GA shape, the audio rate stated explicitly, and
// the duplex extension that today's server needs for VAD-driven responses.
func (c *conv) sessionConfig() map[string]any {
	format := map[string]any{"type": "audio/pcm", "rate": Rate}
	var td any // null: manual turns
	if c.o.Mode == ModeVAD {
		td = map[string]any{"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
			"silence_duration_ms": 500, "create_response": true, "interrupt_response": true}
	}
	s := map[string]any{
		"type":              "realtime",
		"output_modalities": []string{"audio"},
		"audio": map[string]any{
			"input":  map[string]any{"format": format, "turn_detection": td},
			"output": map[string]any{"format": format},
		},
	}
	if c.o.Mode == ModeVAD {
		s["extra_body"] = map[string]any{"auto_response": true}
	}
	if c.o.MaxOutputTokens > 0 {
		s["max_output_tokens"] = c.o.MaxOutputTokens
	}
	return s
}

// stream appends pcm in ChunkMs pieces, paced in real time unless Fast, and reports the time
// of the last append on done.
func (c *conv) stream(ctx context.Context, pcm []int16, done chan<- streamResult) {
	per := Rate * c.o.ChunkMs / 1000
	start := time.Now()
	var last time.Time
	for i := 0; i < len(pcm); i += per {
		chunk := pcm[i:min(i+per, len(pcm))]
		if !c.o.Fast {
			due := start.Add(time.Duration(i) * time.Second / Rate)
			if d := time.Until(due); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					done <- streamResult{err: ctx.Err()}
					return
				}
			}
		}
		if _, err := c.send(ctx, map[string]any{"type": "input_audio_buffer.append",
			"audio": base64.StdEncoding.EncodeToString(Bytes(chunk))}); err != nil {
			done <- streamResult{err: err}
			return
		}
		last = time.Now()
	}
	done <- streamResult{last: last}
}

type streamResult struct {
	last time.Time
	err  error
}

// utterance is what one spoken turn sends: the input, plus trailing silence under VAD.
func (c *conv) utterance() []int16 {
	if c.o.Mode != ModeVAD {
		return c.input
	}
	pad := int(c.o.TrailingSilence.Seconds() * Rate)
	return append(append(make([]int16, 0, len(c.input)+pad), c.input...), make([]int16, pad)...)
}

func (c *conv) run(ctx context.Context) error {
	c.tolerated = map[string]bool{}
	c.turns = map[string]*Turn{}
	// session.update goes out at once: servers that send session.created first and servers that
	// wait for the update both answer it with session.updated.
	cfg := c.sessionConfig()
	if _, err := c.send(ctx, map[string]any{"type": "session.update", "session": cfg}); err != nil {
		return err
	}
	if err := c.awaitUpdated(ctx); err != nil {
		// A strictly GA server refuses the duplex extension; server_vad with create_response
		// says the same thing there, so try once without it.
		var se *ServerError
		if _, ext := cfg["extra_body"]; !ext || !errors.As(err, &se) || !strings.Contains(se.Param+se.Message, "extra_body") {
			return err
		}
		delete(cfg, "extra_body")
		if _, err := c.send(ctx, map[string]any{"type": "session.update", "session": cfg}); err != nil {
			return err
		}
		if err := c.awaitUpdated(ctx); err != nil {
			return err
		}
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	streamDone := make(chan streamResult, 1)
	startStream := func() {
		c.streaming = true
		wg.Add(1)
		go func() { defer wg.Done(); c.stream(streamCtx, c.utterance(), streamDone) }()
	}
	c.expected = 1
	startStream()

	var barge, linger <-chan time.Time
	var bargeTimer, lingerTimer *time.Timer
	defer func() {
		if bargeTimer != nil {
			bargeTimer.Stop()
		}
		if lingerTimer != nil {
			lingerTimer.Stop()
		}
	}()
	for {
		// Done: nothing streams, nothing is active and every expected response has ended
		// (VAD mode lingers for a response the server may still start).
		if !c.streaming && c.active == nil && len(c.res.Turns) >= c.expected {
			if c.o.Mode != ModeVAD {
				return nil
			}
			if linger == nil {
				lingerTimer = time.NewTimer(c.o.Linger)
				linger = lingerTimer.C
			}
		} else if linger != nil {
			lingerTimer.Stop()
			linger = nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case r := <-streamDone:
			c.streaming = false
			if r.err != nil {
				return r.err
			}
			c.lastSent = r.last
			if c.o.Mode == ModeManual {
				if _, err := c.send(ctx, map[string]any{"type": "input_audio_buffer.commit"}); err != nil {
					return err
				}
				c.inputEnd = time.Now()
				if _, err := c.send(ctx, map[string]any{"type": "response.create"}); err != nil {
					return err
				}
			}
		case <-barge:
			barge = nil
			c.bargeDone = true
			c.expected++
			c.closeLine()
			fmt.Fprintf(c.o.Out, "barge-in: speaking again %s into the reply\n", c.o.BargeInAt)
			if c.o.Mode == ModeManual && c.active != nil {
				id, err := c.send(ctx, map[string]any{"type": "response.cancel"})
				if err != nil {
					return err
				}
				c.tolerated[id] = true
				if err := c.truncate(ctx, c.active); err != nil {
					return err
				}
			}
			startStream()
		case <-linger:
			return nil
		case ev, ok := <-c.events:
			if !ok {
				return errors.New("the server closed the connection")
			}
			if err := c.handle(ctx, ev); err != nil {
				return err
			}
			// The barge-in goes into the first reply that has audio (the server's VAD may have
			// ended and cancelled a silent one before it).
			if c.o.BargeInAt > 0 && !c.bargeDone && barge == nil && c.active != nil && !c.active.FirstAudio.IsZero() {
				bargeTimer = time.NewTimer(time.Until(c.active.FirstAudio.Add(c.o.BargeInAt)))
				barge = bargeTimer.C
			}
			if barge != nil && c.active == nil && !c.bargeDone {
				// The reply ended before the barge-in offset: nothing to interrupt.
				bargeTimer.Stop()
				barge = nil
				c.bargeDone = true
				fmt.Fprintf(c.o.Out, "barge-in: the reply ended before %s\n", c.o.BargeInAt)
			}
		}
	}
}

// truncate tells the server how much of t's audio was heard: the time since its first audio,
// at most what arrived.
func (c *conv) truncate(ctx context.Context, t *Turn) error {
	if t == nil || t.FirstAudio.IsZero() {
		return nil
	}
	heard := min(float64(time.Since(t.FirstAudio).Milliseconds()), t.AudioMs)
	id, err := c.send(ctx, map[string]any{"type": "conversation.item.truncate", "item_id": t.itemID(),
		"content_index": 0, "audio_end_ms": int(heard)})
	if err != nil {
		return err
	}
	c.tolerated[id] = true
	return nil
}

func (c *conv) awaitUpdated(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case ev, ok := <-c.events:
			if !ok {
				return errors.New("the server closed the connection during the handshake")
			}
			switch e := ev.ev.(type) {
			case protocol.SessionUpdated:
				return nil
			case protocol.ErrorEvent:
				return decodeError(e)
			}
		}
	}
}

func decodeError(ev protocol.ErrorEvent) *ServerError {
	e := ev.Error
	se := &ServerError{Type: e.Type, Code: e.Code, Message: e.Message}
	if e.Param != nil {
		se.Param = *e.Param
	}
	if e.EventID != nil {
		se.EventID = *e.EventID
	}
	return se
}

// toleratedCodes are the races every Realtime client expects: clients such as pipecat treat any
// other error as fatal, so these codes mark a benign race, not a failure.
var toleratedCodes = map[string]bool{
	"response_cancel_not_active":               true,
	"response_not_active":                      true,
	"conversation_already_has_active_response": true,
	"item_truncate_invalid_item_id":            true,
	// The same races in vllm-omni's codes (?duplex=1, docs/REALTIME.md "vllm-omni duplex dialect").
	"response_already_active": true,
	"item_not_found":          true,
}

func (c *conv) closeLine() {
	if c.lineOpen {
		fmt.Fprintln(c.o.Out)
		c.lineOpen = false
	}
}

func (c *conv) handle(ctx context.Context, se serverEvent) error {
	switch ev := se.ev.(type) {
	case protocol.SessionResumed: // the link resumed the session on a new connection
		c.res.Resumes++
		c.closeLine()
		fmt.Fprintf(c.o.Out, "connection lost: resumed session %s (%d events replayed)\n", ev.SessionID, ev.ReplayedEvents)
	case protocol.ErrorEvent:
		se := decodeError(ev)
		if c.tolerated[se.EventID] || toleratedCodes[se.Code] {
			c.res.Warnings = append(c.res.Warnings, se)
			c.closeLine()
			fmt.Fprintf(c.o.Out, "warning: %s\n", se.Error())
			return nil
		}
		return se
	case protocol.InputAudioBufferSpeechStarted:
		if c.o.Mode == ModeVAD && c.active != nil && !c.active.FirstAudio.IsZero() {
			if err := c.truncate(ctx, c.active); err != nil {
				return err
			}
		}
	case protocol.InputAudioBufferSpeechStopped:
		c.inputEnd = se.at
	case protocol.TranscriptionCompleted:
		text := strings.TrimSpace(ev.Transcript)
		c.res.UserTranscripts = append(c.res.UserTranscripts, text)
		c.users = append(c.users, text)
		c.closeLine()
		fmt.Fprintf(c.o.Out, "you: %s\n", text)
	case protocol.ResponseCreated:
		id := ev.Response.ID
		t := &Turn{N: len(c.res.Turns) + len(c.turns) + 1, ResponseID: id, Created: se.at, InputEnd: c.inputEnd}
		if c.o.Mode == ModeVAD && t.InputEnd.IsZero() {
			t.InputEnd = c.lastSent
		}
		c.inputEnd = time.Time{}
		c.turns[id] = t
		c.active = t
	case protocol.ResponseOutputAudioDelta:
		t := c.turns[ev.ResponseID]
		if t == nil {
			return nil
		}
		pcm, err := base64.StdEncoding.DecodeString(ev.Delta)
		if err != nil {
			return fmt.Errorf("decoding assistant audio: %w", err)
		}
		s := PCM16(pcm)
		if t.FirstAudio.IsZero() {
			t.FirstAudio = se.at
		}
		t.AudioMs += float64(len(s)) * 1000 / Rate
		c.res.Reply = append(c.res.Reply, s...)
		if c.o.OnAudio != nil {
			c.o.OnAudio(s)
		}
		if t.item == "" {
			t.item = ev.ItemID
		}
	case protocol.ResponseOutputAudioTranscriptDelta:
		c.assistantText(ev.ResponseID, ev.Delta)
	case protocol.ResponseOutputTextDelta:
		c.assistantText(ev.ResponseID, ev.Delta)
	case protocol.ResponseDone:
		r := ev.Response
		t := c.turns[r.ID]
		if t == nil {
			t = &Turn{N: len(c.res.Turns) + 1, ResponseID: r.ID}
		}
		delete(c.turns, r.ID)
		t.Status, t.Done = r.Status, se.at
		if r.StatusDetails != nil {
			t.Reason = r.StatusDetails.Reason
		}
		t.Assistant = strings.TrimSpace(t.Assistant)
		if len(c.users) > 0 {
			t.User = strings.Join(c.users, " ")
			c.users = nil
		}
		c.res.Turns = append(c.res.Turns, *t)
		if c.active == t {
			c.active = nil
		}
		c.closeLine()
		fmt.Fprintln(c.o.Out, t.Line())
	}
	return nil
}

// assistantText prints a transcript or text delta of response id.
func (c *conv) assistantText(id, d string) {
	t := c.turns[id]
	if t == nil || d == "" {
		return
	}
	t.Assistant += d
	if !c.lineOpen {
		fmt.Fprint(c.o.Out, "assistant:")
		c.lineOpen = true
		if !strings.HasPrefix(d, " ") {
			d = " " + d
		}
	}
	fmt.Fprint(c.o.Out, d)
}
