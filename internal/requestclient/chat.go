package requestclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/stage"
)

// chatAbortWait bounds how long Close waits for the pipeline to wind an aborted request down, so
// that the stages' last metrics still reach the tables; a stage that ignores the abort longer than
// this does not hold the caller.
const chatAbortWait = 5 * time.Second

// ChatEvent is one piece of a chat completion. Text carries the thinker's text deltas; Audio carries
// talker PCM chunks (mono float32 at SampleRate, 24 kHz by default). The last event has Done (with
// FinishReason stop | length | tool_calls | abort and the token counts) or Err. A ToolCall event
// is one complete call of the model (its markup never comes as Text).
type ChatEvent struct {
	Text                           string
	ToolCall                       *duplex.ToolCall
	Logprobs                       []TokenLogprob // of Text's tokens, when asked
	Audio                          []float32
	SampleRate                     int
	Done                           bool
	FinishReason                   string
	PromptTokens, CompletionTokens int
	Err                            error
}

// ChatStream is one running chat completion. Read Events until it is closed, then call Close;
// calling Close early aborts the generation.
type ChatStream struct {
	c      *Client
	st     *chatState
	req    *stage.Request
	cancel context.CancelFunc
	ctxEnd <-chan struct{} // the request's ctx: closed once the caller or Close cancelled it
	events chan ChatEvent
	quit   chan struct{} // closed by Close: the pump stops delivering
	pumped chan struct{} // closed when the pump goroutine has returned
	once   sync.Once
}

// Chat submits req to the pipeline and streams its outputs. A missing req.RequestID gets a fresh
// chatcmpl-<16 hex>; the internal id (the tables' request_id and the pipeline's) appends -<8 hex>
// to it, as vllm-omni does, so one external id may be retried without colliding.
func (c *Client) Chat(ctx context.Context, creq ChatRequest) (*ChatStream, error) {
	req := creq
	wallStart := c.clock() // arrival: before any preprocessing in the pipeline
	if req.RequestID == "" {
		req.RequestID = "chatcmpl-" + randHex(8)
	}
	req.RequestID += "-" + randHex(4)
	if !c.register(req.RequestID, "chat") {
		return nil, fmt.Errorf("chat request %s is already live", req.RequestID)
	}
	st := newChatState(c, req, wallStart, c.pipeline.NumStages())
	reqCtx, cancel := context.WithCancel(ctx)
	st.setReqStart(c.clock()) // provisional: outputs may arrive before SubmitChat returns
	r, err := c.pipeline.SubmitChat(reqCtx, req, st)
	if err != nil {
		cancel()
		c.unregister(req.RequestID)
		return nil, fmt.Errorf("submitting chat request %s: %w", req.RequestID, err)
	}
	st.setReqStart(c.clock()) // vllm-omni's req_start: right after the submit returns
	s := &ChatStream{c: c, st: st, req: r, cancel: cancel, ctxEnd: reqCtx.Done(),
		events: make(chan ChatEvent, chatEventBuffer), quit: make(chan struct{}), pumped: make(chan struct{})}
	go s.pump()
	return s, nil
}

// Events returns the completion's events; it is closed after the Done (or Err) event, or when the
// stream is closed.
func (s *ChatStream) Events() <-chan ChatEvent { return s.events }

// Close releases the request. If the completion has not finished it is aborted at once and
// finalized with reason abort (its tables are still printed). Close waits for the stream's goroutine
// and is idempotent.
func (s *ChatStream) Close() {
	s.once.Do(func() {
		if !s.st.isFinished() {
			// Cancel first so the pump, seeing Done without a Finished output, knows it was
			// an abort. The stages' last metrics arrive before Done (stage.Request.Abort).
			s.cancel()
			s.req.Abort()
			t := time.NewTimer(chatAbortWait)
			select {
			case <-s.req.Done():
			case <-t.C:
				s.c.log.Warn("chat request did not stop within the abort wait", zap.String("request_id", s.st.id),
					zap.Duration("wait", chatAbortWait))
			}
			t.Stop()
			s.st.finish("abort", nil)
		}
		close(s.quit)
		<-s.pumped
		s.cancel()
		s.st.report()
	})
}

// pump moves queued events to the bounded events channel. The sink never blocks on a slow HTTP
// client: it appends to a queue bounded by the request's own output (max_tokens and its audio),
// and this goroutine, owned by the stream and stopped by Close, does the waiting.
func (s *ChatStream) pump() {
	defer close(s.pumped)
	defer close(s.events)
	pipelineDone := s.req.Done()
	for {
		batch, last := s.st.take()
		for _, ev := range batch {
			select {
			case s.events <- ev:
			case <-s.quit:
				return
			}
		}
		if last {
			// Done was delivered; print and record now rather than at Close, so the tables do not
			// wait for the HTTP handler.
			s.st.report()
			return
		}
		select {
		case <-s.st.notify:
		case <-pipelineDone:
			// Done closes after the request's last Sink call, so every event, the stages'
			// final metrics included, is in (or already through) the queue: a request still
			// unfinished now has no Finished output coming. Loop once more to deliver it.
			pipelineDone = nil
			select {
			case <-s.ctxEnd:
				s.st.finish("abort", nil) // the caller went away (or Close): cut short, not failed
			default:
				s.st.finish("error", errors.New("the pipeline ended the request without a final output"))
			}
		case <-s.quit:
			return
		}
	}
}

const chatEventBuffer = 64

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
