package latency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/benchreport"
)

// LongOptions configure `omniserve bench long`: one realtime session of many turns.
type LongOptions struct {
	Bin, Addr, Model string
	Speech           string // 16 kHz PCM16 speech: the user's turn (Text "" = audio turns)
	Text             string // a text turn instead of speech (conversation.item.create)
	Turns            int
	MaxOutputTokens  int
	// Truncation is session.truncation as the client sends it: "auto", "disabled" or a JSON
	// retention_ratio object.
	Truncation string
	// SeqContext, when > 0, is the started server's engine.seq_context (OMNISERVE_SEQ_CONTEXT).
	SeqContext int
	Meter      bench.Meter
}

// CheckLong refuses options no long session can run with: the flag and why.
func CheckLong(o LongOptions) error {
	if o.Turns < 20 {
		return fmt.Errorf("--turns %d: at least 20 (the ratio compares the first 10 with the last 10)", o.Turns)
	}
	if o.MaxOutputTokens < 1 {
		return fmt.Errorf("--max-output-tokens %d: at least 1", o.MaxOutputTokens)
	}
	if o.SeqContext < 0 {
		return fmt.Errorf("--seq-context %d: 0 (the server's default) or more", o.SeqContext)
	}
	_, err := truncationValue(o.Truncation)
	return err
}

// longTurn is what one turn of the long session measured.
type longTurn struct {
	latency float64 // commit (or response.create of a text turn) → first audio delta, ms
	deleted int     // conversation.item.deleted events during the turn
	failed  bool
}

// RunLong runs the long session and returns its figures; a line per tenth of the turns goes to
// out.
func RunLong(ctx context.Context, o LongOptions, out io.Writer) ([]bench.Figure, error) {
	if err := CheckLong(o); err != nil {
		return nil, err
	}
	trunc, err := truncationValue(o.Truncation)
	if err != nil {
		return nil, err
	}
	var speech []float32
	if o.Text == "" {
		if speech, err = readRaw(o.Speech); err != nil {
			return nil, err
		}
	}
	addr, pid := o.Addr, 0
	if addr == "" {
		so := Options{Bin: o.Bin, Model: o.Model}
		if o.SeqContext > 0 {
			so.Env = []string{"OMNISERVE_SEQ_CONTEXT=" + strconv.Itoa(o.SeqContext)}
		}
		stop, a, p, err := startServer(ctx, so)
		if err != nil {
			return nil, err
		}
		defer stop()
		addr, pid = a, p
	}
	cl, err := dial(ctx, "ws://"+addr+"/v1/realtime", 0, nil)
	if err != nil {
		return nil, err
	}
	defer cl.close()
	update := map[string]any{"type": "realtime", "truncation": trunc, "max_output_tokens": o.MaxOutputTokens}
	if err := cl.send(ctx, map[string]any{"type": "session.update", "session": update}); err != nil {
		return nil, err
	}
	if _, err := cl.waitFor(ctx, 20*time.Second, func(e event) bool { return e.typ == "session.updated" }); err != nil {
		return nil, fmt.Errorf("session.update (truncation %s): %w", o.Truncation, err)
	}
	r := longRun{o: o, cl: cl, speech: speech, pid: pid, early: max(1, o.Turns/10), out: out}
	return r.run(ctx)
}

// longRun is one long session in progress.
type longRun struct {
	o      LongOptions
	cl     *client
	speech []float32
	pid    int
	early  int // the turn after which the first RSS is read (turn 50 of 500)
	out    io.Writer

	turns              []longTurn
	rssEarly, rssFinal float64 // MiB; 0 without a pid
}

func (r *longRun) run(ctx context.Context) ([]bench.Figure, error) {
	prog := r.o.Meter.Start("long", r.o.Turns, "turns")
	defer prog.Done()
	start := time.Now()
	for i := range r.o.Turns {
		t, err := r.turn(ctx)
		if err != nil {
			return r.figures(), fmt.Errorf("turn %d: %w", i+1, err)
		}
		r.turns = append(r.turns, t)
		prog.Add(1)
		if i+1 == r.early {
			r.rssEarly = procRSSMiB(r.pid)
		}
		if (i+1)%max(1, r.o.Turns/10) == 0 {
			fmt.Fprintf(r.out, "turn %d: commit → first audio %.0f ms, %d items deleted so far, RSS %.1f MiB, %s elapsed\n",
				i+1, t.latency, r.deleted(), procRSSMiB(r.pid), time.Since(start).Round(time.Second))
		}
	}
	r.rssFinal = procRSSMiB(r.pid)
	return r.figures(), nil
}

// turn is one user turn and its reply, read to response.done.
func (r *longRun) turn(ctx context.Context) (longTurn, error) {
	cl := r.cl
	if r.o.Text != "" {
		item := map[string]any{"type": "message", "role": "user", "content": []map[string]any{{"type": "input_text", "text": r.o.Text}}}
		if err := cl.send(ctx, map[string]any{"type": "conversation.item.create", "item": item}); err != nil {
			return longTurn{}, err
		}
	} else {
		// Faster than real time: the whole utterance in 100 ms appends, unpaced.
		step := inRate * chunkMs / 1000
		for i := 0; i < len(r.speech); i += step {
			if err := cl.appendAudio(ctx, r.speech[i:min(i+step, len(r.speech))], time.Now()); err != nil {
				return longTurn{}, err
			}
		}
		if err := cl.send(ctx, map[string]any{"type": "input_audio_buffer.commit"}); err != nil {
			return longTurn{}, err
		}
	}
	t0 := time.Now()
	if err := cl.send(ctx, map[string]any{"type": "response.create"}); err != nil {
		return longTurn{}, err
	}
	var t longTurn
	var first time.Time
	for {
		e, err := cl.waitFor(ctx, 2*time.Minute, func(e event) bool {
			switch e.typ {
			case "audio":
				if first.IsZero() {
					first = e.at
				}
			case "conversation.item.deleted":
				t.deleted++
			}
			return e.typ == "response.done"
		})
		if err != nil && e.typ != "error" {
			return t, err // the connection ended or the reply never came
		}
		if err != nil {
			t.failed = true // an error event; its response.done follows
			continue
		}
		if status := responseStatus(e); status != "completed" && status != "incomplete" {
			t.failed = true
		}
		break
	}
	if first.IsZero() {
		t.failed = true
	} else {
		t.latency = ms(first.Sub(t0))
	}
	return t, nil
}

// responseStatus is the status of a response.done event.
func responseStatus(e event) string {
	b, err := json.Marshal(e.ev)
	if err != nil {
		return ""
	}
	var v struct {
		Response struct {
			Status string `json:"status"`
		} `json:"response"`
	}
	if json.Unmarshal(b, &v) != nil {
		return ""
	}
	return v.Response.Status
}

func (r *longRun) deleted() int {
	n := 0
	for _, t := range r.turns {
		n += t.deleted
	}
	return n
}

// figures are the long session's figures: the latency of every turn, the ratio of the last ten
// turns' median to the first ten's, the RSS growth, failures and deletions.
func (r *longRun) figures() []bench.Figure {
	n := len(r.turns)
	lat := make([]float64, 0, n)
	var dropLat []float64 // the turns whose input made the engine drop the oldest turns
	failed := 0
	for _, t := range r.turns {
		if t.failed {
			failed++
			continue
		}
		lat = append(lat, t.latency)
		if t.deleted > 0 {
			dropLat = append(dropLat, t.latency)
		}
	}
	figs := []bench.Figure{
		{Name: "long_turn_latency_ms", Unit: "ms", Definition: "one turn of the long session: commit (a text turn: response.create) to the reply's first audio delta",
			Samples: lat, Keys: []bench.Stat{bench.P50, bench.P99, bench.Max}, Digits: 0},
		bench.One("long_turns", "turns", "turns run in the session", float64(n), 0),
		bench.One("long_turns_failed", "turns", "turns whose response did not complete (an error, no audio)", float64(failed), 0),
		bench.One("long_items_deleted", "items", "conversation.item.deleted events (truncation) over the session", float64(r.deleted()), 0),
		bench.One("long_truncations", "turns", "turns in which items were deleted (each a drop of the oldest turns)", float64(len(dropLat)), 0),
	}
	if len(dropLat) > 0 {
		figs = append(figs, bench.Figure{Name: "long_drop_turn_latency_ms", Unit: "ms",
			Definition: "commit → first audio of the turns in which the oldest turns were dropped (the kept turns are prefilled again)",
			Samples:    dropLat, Keys: []bench.Stat{bench.P50, bench.Max}, Digits: 0})
	}
	if n >= 20 && len(lat) == n {
		head, tail := latencies(r.turns[:10]), latencies(r.turns[n-10:])
		figs = append(figs, bench.One(fmt.Sprintf("long_turn_latency_ratio_%d", n), "ratio",
			fmt.Sprintf("median commit → first audio of turns %d–%d divided by that of turns 1–10", n-9, n),
			benchreport.Quantile(tail, 50)/benchreport.Quantile(head, 50), 3))
	}
	if r.rssEarly > 0 && r.rssFinal > 0 {
		figs = append(figs,
			bench.One("long_rss_growth_mib", "MiB", fmt.Sprintf("server RSS after turn %d minus after turn %d", n, r.early), r.rssFinal-r.rssEarly, 1),
			bench.One("long_rss_mib", "MiB", fmt.Sprintf("server RSS after turn %d", n), r.rssFinal, 1))
	}
	return figs
}

func latencies(ts []longTurn) []float64 {
	out := make([]float64, len(ts))
	for i, t := range ts {
		out[i] = t.latency
	}
	return out
}

// truncationValue is --truncation as session.truncation's value: "auto" / "disabled", or a
// JSON object.
func truncationValue(s string) (any, error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "{") {
		if s != "auto" && s != "disabled" {
			return nil, fmt.Errorf("--truncation %q: auto, disabled or a JSON retention_ratio object", s)
		}
		return s, nil
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, fmt.Errorf("--truncation: %w", err)
	}
	return v, nil
}

// procRSSMiB is process pid's resident set (VmRSS of /proc/<pid>/status) in MiB; 0 when pid is 0
// or unreadable.
func procRSSMiB(pid int) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	kb, err := parseVmRSS(string(b))
	if err != nil {
		return 0
	}
	return float64(kb) / 1024
}

// parseVmRSS reads the VmRSS line (kB) of a /proc/<pid>/status text.
func parseVmRSS(status string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, errors.New("no VmRSS line in /proc/<pid>/status")
}
