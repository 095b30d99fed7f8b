package stage

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/omniserve/omniserve/internal/gpu"
)

// ErrNoEndOfTurn reports a stream that cannot estimate the end of the user's turn: the thinker
// is remote (no local sequence to score on) or the ASR gives no partial hypothesis.
var ErrNoEndOfTurn = errors.New("stage: no end-of-turn estimate on this stream")

// EndOfTurn is the thinker's estimate that the user's open utterance ends the turn.
type EndOfTurn struct {
	// Prob is the probability the thinker gives the chat template's end-of-user-turn token
	// right after Text (gpu.UserTurnEnd), the conversation before it as context.
	Prob float64
	// Text is the ASR's partial hypothesis of the open utterance it was computed on.
	Text string
}

// eotJob is a StartEndOfTurn score, run on the sequence goroutine.
type eotJob struct {
	text string
	res  chan eotResult // cap 1
}

type eotResult struct {
	e   EndOfTurn
	err error
}

// StartEndOfTurn takes the ASR's partial hypothesis of the open utterance now, in order with
// the audio calls (after every earlier append), and queues its score on the sequence
// goroutine, in order with prefills and responses; wait returns the estimate. The sequence is
// left as it was (gpu.Sequence.NextTokenProb). semantic_vad asks for it in a pause.
func (d *DuplexStream) StartEndOfTurn(ctx context.Context) (wait func(context.Context) (EndOfTurn, error), err error) {
	if d.conv.seq == nil {
		return nil, fmt.Errorf("estimating the end of turn: %w: remote thinker", ErrNoEndOfTurn)
	}
	if why := d.p.endOfTurnOff(); why != "" {
		return nil, fmt.Errorf("estimating the end of turn: %w: %s", ErrNoEndOfTurn, why)
	}
	if err := d.ear.lock(ctx); err != nil {
		return nil, fmt.Errorf("estimating the end of turn: %w", err)
	}
	text, ok := d.ear.partial()
	d.ear.unlock()
	if !ok {
		return nil, fmt.Errorf("estimating the end of turn: %w: the ASR has no partial hypothesis", ErrNoEndOfTurn)
	}
	j, err := d.conv.queueEndOfTurn(text)
	if err != nil {
		return nil, fmt.Errorf("estimating the end of turn: %w", err)
	}
	return func(ctx context.Context) (EndOfTurn, error) {
		select {
		case r := <-j.res:
			return r.e, r.err
		case <-d.conv.closed:
			return EndOfTurn{}, fmt.Errorf("estimating the end of turn: %w", ErrClosed)
		case <-ctx.Done():
			return EndOfTurn{}, fmt.Errorf("estimating the end of turn: %w", ctx.Err())
		}
	}, nil
}

// queueEndOfTurn queues the score of text on the sequence goroutine, in order with prefills
// and responses. It never waits for room: the caller holds the audio lock or runs in the
// append FIFO.
func (c *conversation) queueEndOfTurn(text string) (*eotJob, error) {
	j := &eotJob{text: text, res: make(chan eotResult, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isClosed() {
		return nil, ErrClosed
	}
	select {
	case c.jobs <- seqJob{eot: j}:
		return j, nil
	default:
		return nil, fmt.Errorf("%w: %d jobs are queued", ErrQueueFull, cap(c.jobs))
	}
}

// scoreEndOfTurn runs an eotJob: the conversation so far with the partial text as the user's
// open message, rendered up to the end of the text, scored for the end-of-user-turn token on
// top of what the sequence already holds.
func (c *conversation) scoreEndOfTurn(j *eotJob) {
	score := c.endOfTurn
	if c.scoreEOT != nil {
		score = c.scoreEOT
	}
	e, err := score(j.text)
	if err != nil {
		err = fmt.Errorf("estimating the end of turn: %w", err)
	}
	j.res <- eotResult{e: e, err: err}
}

func (c *conversation) endOfTurn(text string) (EndOfTurn, error) {
	eng := c.p.deps.Engine
	end, err := eng.UserTurnEnd()
	if err != nil {
		return EndOfTurn{}, err
	}
	c.mu.Lock()
	hist := append(append([]gpu.ChatMessage(nil), c.history...), gpu.ChatMessage{Role: "user", Content: text})
	fed := c.fedText
	c.mu.Unlock()
	want, err := eng.ChatPrompt(hist, false)
	if err != nil {
		return EndOfTurn{}, fmt.Errorf("rendering conversation: %w: %w", ErrTemplate, err)
	}
	delta, ok := strings.CutPrefix(want, fed)
	if !ok {
		// The sequence's text is no prefix of the rendering (a trimmed history, an aborted
		// reply's header): the open message rendered alone follows what the sequence holds,
		// as syncHistoryTo appends it.
		if delta, err = eng.ChatPrompt(hist[len(hist)-1:], false); err != nil {
			return EndOfTurn{}, fmt.Errorf("rendering conversation: %w: %w", ErrTemplate, err)
		}
	}
	delta, ok = strings.CutSuffix(delta, end.Markup)
	if !ok {
		return EndOfTurn{}, errors.New("the chat template does not end the user's message with its end-of-turn markup")
	}
	p, err := c.seq.NextTokenProb(c.ctx, delta, end.Token)
	if err != nil {
		return EndOfTurn{}, err
	}
	return EndOfTurn{Prob: p, Text: text}, nil
}

// endOfTurnOff says why the thinker is not asked for the end of a turn (pipeline.thinker
// .end_of_turn), or "" when it is.
func (p *Pipeline) endOfTurnOff() string {
	switch p.cfg.Thinker.EndOfTurn {
	case endOfTurnThinker:
		return ""
	case endOfTurnOff:
		return "pipeline.thinker.end_of_turn is off"
	}
	if strings.HasPrefix(p.deps.Engine.Info().Name, "dummy") {
		return "the dummy model's probability means nothing (pipeline.thinker.end_of_turn: auto; set thinker to use it anyway)"
	}
	return ""
}
