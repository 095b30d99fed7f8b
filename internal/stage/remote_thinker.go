package stage

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/omniserve/omniserve/internal/duplex"
	"io"
	"net/http"
	"time"

	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/metrics"
)

// remoteThinker is stage 0's LLM on an OpenAI-compatible server: each response is one streamed
// POST /v1/chat/completions carrying the whole conversation (the server keeps no state between
// them, so the prefix cache is the upstream's business).
type remoteThinker struct {
	c *remoteClient
}

func newRemoteThinker(cfg RemoteConfig) *remoteThinker {
	return &remoteThinker{c: newRemoteClient(stageThinker, cfg)}
}

// where names the backend for logs and errors.
func (t *remoteThinker) where() string { return t.c.url("/chat/completions") }

// remoteGen is one response of the remote thinker; it has the shape of gpu.Sequence's Generate
// so that generate streams it to the Sink and the talker exactly like a local generation.
type remoteGen struct {
	t        *remoteThinker
	msgs     []gpu.ChatMessage
	sampling gpu.Sampling
}

type chatCompletionBody struct {
	Model         string            `json:"model"`
	Messages      []chatMessageJSON `json:"messages"`
	Stream        bool              `json:"stream"`
	StreamOptions map[string]bool   `json:"stream_options"`
	MaxTokens     int               `json:"max_tokens,omitempty"`
	Temperature   *float32          `json:"temperature,omitempty"`
	TopP          float32           `json:"top_p,omitempty"`
	Seed          *uint32           `json:"seed,omitempty"`
	Stop          []string          `json:"stop,omitempty"`
}

type chatMessageJSON struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatChunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    any    `json:"code"`
	} `json:"error"`
}

// Generate streams the reply: emit gets each content delta as it arrives. Retries happen only
// before the first token. On ctx end (cancel, barge-in) the upstream request is closed at once
// and the result is the partial one with reason abort.
func (g remoteGen) Generate(ctx context.Context, opts gpu.GenerateOptions, emit func(gpu.Piece) error) (res gpu.GenerateResult, err error) {
	t := g.t
	submit := time.Now()
	res.Stats.SubmitTS = metrics.Now()
	raw, err := json.Marshal(g.body(opts))
	if err != nil {
		return res, fmt.Errorf("encoding chat request: %w", err)
	}
	wctx, wd := newWatchdog(ctx, t.c.cfg.FirstByteTimeout, t.c.cfg.IdleTimeout)
	defer wd.stop()
	resp, err := t.c.post(wctx, "/chat/completions", "application/json", "text/event-stream", raw)
	if err != nil {
		return g.end(ctx, res, timeoutError(wctx, stageThinker, t.where(), err))
	}
	defer resp.Body.Close()

	rd := &chatStream{g: g, submit: submit, status: resp.StatusCode, emit: emit}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		data, ok := sseData(sc.Bytes())
		if !ok {
			continue // comments, event names, blank separators
		}
		if string(data) == "[DONE]" {
			break
		}
		wd.kick()
		if done, err := rd.chunk(&res, data); done {
			return g.end(ctx, res, err)
		}
		if rd.aborted {
			res.FinishReason = duplex.FinishAbort
			g.finishStats(&res)
			return res, nil
		}
		// With include_usage the usage chunk follows the finish chunk; without it (servers
		// that ignore stream_options) [DONE] follows. Either way keep reading.
	}
	if err := sc.Err(); err != nil {
		return g.end(ctx, res, timeoutError(wctx, stageThinker, t.where(),
			&UpstreamError{Stage: stageThinker, URL: t.where(), Message: "stream broken: " + err.Error(), Err: err}))
	}
	return g.ended(ctx, res)
}

// body is the chat completion request of the generation.
func (g remoteGen) body(opts gpu.GenerateOptions) chatCompletionBody {
	body := chatCompletionBody{
		Model: g.t.c.cfg.Model, Stream: true, StreamOptions: map[string]bool{"include_usage": true},
		MaxTokens: opts.MaxTokens, Stop: opts.Stop,
	}
	s := g.sampling
	if opts.Sampling != nil {
		s = *opts.Sampling
	}
	temp := s.Temperature
	body.Temperature, body.TopP = &temp, s.TopP
	if s.Seed != 0 && !s.RandomSeed {
		seed := s.Seed
		body.Seed = &seed
	}
	for _, m := range g.msgs {
		body.Messages = append(body.Messages, chatMessageJSON{Role: m.Role, Content: m.Content})
	}
	return body
}

// ended is the result of a stream that ended without an error of its own.
func (g remoteGen) ended(ctx context.Context, res gpu.GenerateResult) (gpu.GenerateResult, error) {
	if ctx.Err() != nil {
		return g.end(ctx, res, ctx.Err())
	}
	if res.FinishReason == "" {
		// The body ended without a finish_reason or [DONE]: the upstream went away mid-reply.
		return g.end(ctx, res, &UpstreamError{Stage: stageThinker, URL: g.t.where(), Message: "stream ended before the reply finished", Err: io.ErrUnexpectedEOF})
	}
	if res.FinishReason != duplex.FinishStop && res.FinishReason != duplex.FinishLength {
		res.FinishReason = duplex.FinishStop // content_filter, tool_calls: the text is what it is
	}
	g.finishStats(&res)
	return res, nil
}

// sseData is the payload of a server-sent event's data line (ok false for any other line).
func sseData(line []byte) ([]byte, bool) {
	data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:"))
	return bytes.TrimSpace(data), ok
}

// chatStream reads one streamed chat completion's chunks into the result.
type chatStream struct {
	g       remoteGen
	submit  time.Time
	status  int
	emit    func(gpu.Piece) error
	last    time.Time // when the last content arrived
	aborted bool      // emit refused a piece: the turn was aborted
}

// chunk folds one chunk into res; done (with the error to end on) when the chunk is an error.
func (rd *chatStream) chunk(res *gpu.GenerateResult, data []byte) (done bool, err error) {
	t := rd.g.t
	var ch chatChunk
	if err := json.Unmarshal(data, &ch); err != nil {
		return true, &UpstreamError{Stage: stageThinker, URL: t.where(), Status: rd.status,
			Message: fmt.Sprintf("bad stream chunk: %v", err)}
	}
	if ch.Error != nil {
		return true, upstreamErrorFrom(stageThinker, t.where(), rd.status, data)
	}
	if ch.Usage != nil {
		res.Stats.TokensIn, res.Stats.TokensOut = ch.Usage.PromptTokens, ch.Usage.CompletionTokens
	}
	for _, c := range ch.Choices {
		if c.Delta.Content != "" && !rd.content(res, c.Delta.Content) {
			return false, nil
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			res.FinishReason = *c.FinishReason
		}
	}
	return false, nil
}

// content emits one piece of the reply and times it; false when the turn was aborted.
func (rd *chatStream) content(res *gpu.GenerateResult, text string) bool {
	now := time.Now()
	if rd.last.IsZero() {
		res.Stats.TTFTMs = float64(now.Sub(rd.submit)) / float64(time.Millisecond)
	} else {
		res.Stats.ITLsMs = append(res.Stats.ITLsMs, float64(now.Sub(rd.last))/float64(time.Millisecond))
	}
	rd.last = now
	if err := rd.emit(gpu.Piece{Text: text}); err != nil {
		rd.aborted = true
		return false
	}
	return true
}

func (g remoteGen) end(ctx context.Context, res gpu.GenerateResult, err error) (gpu.GenerateResult, error) {
	g.finishStats(&res)
	if ctx.Err() != nil {
		res.FinishReason = duplex.FinishAbort
		return res, nil
	}
	var ue *UpstreamError
	if !errors.As(err, &ue) && isAbort(err) {
		// The watchdog cut it but the cause was lost in wrapping: report a timeout.
		err = &UpstreamError{Stage: stageThinker, URL: g.t.where(), Status: http.StatusGatewayTimeout,
			Type: "server_error", Code: "upstream_timeout", Message: "upstream timed out", Err: err}
	}
	return res, err
}

func (g remoteGen) finishStats(res *gpu.GenerateResult) {
	st := &res.Stats
	if st.TokensOut == 0 {
		st.TokensOut = len(st.ITLsMs)
		if st.TTFTMs > 0 {
			st.TokensOut++
		}
	}
	st.TPOTMs = mean(st.ITLsMs)
	st.BatchSize = 0
}
