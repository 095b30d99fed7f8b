package metrics

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// summary is the rendering of one finalized record (FinalizedRequest.tableSummary); it exists
// for tests and callers that want the figures without parsing log text.
type summary struct {
	// Overall holds the Overall Summary rows that survived the zero filter, in order.
	Overall []summaryRow
	// Request is the record's own section.
	Request requestSummary
	// Entries are the logged texts in order: tables as "[<title>]\n<table>" (logged with a
	// leading "\n") and the "[OmniTiming] ..." line.
	Entries []string
}

// summaryRow is one Field | Value row of the Overall Summary.
type summaryRow struct {
	Key   string
	Value float64
}

// overallValue returns the Overall Summary value of key.
func (s summary) overallValue(key string) (float64, bool) {
	for _, r := range s.Overall {
		if r.Key == key {
			return r.Value, true
		}
	}
	return 0, false
}

// requestSummary is the record's section.
type requestSummary struct {
	RequestID  string
	E2E        RequestE2EStats
	Stages     []StageRequestStats // sorted by stage id
	Transfers  []TransferEdgeStats // sorted by (from, to)
	OmniTiming string
	ToolCalls  []ToolCallStats // a turn's tool and MCP calls; nil = none (no table)
}

// tableInputs are what the --log-stats tables show beside a record's rows, e2e and edges: the
// Overall Summary's wall times and the identity in titles and the [OmniTiming] line. Only the
// renderer (summary.go) reads them, so they are not part of the record's exported fields.
type tableInputs struct {
	wallStart, wallEnd float64     // e2e_wall_time_ms runs from the turn's t0 to its end
	stageSpans         []stageSpan // index = stage id: e2e_stage_<i>_wall_time_ms
	// identity names a duplex turn, or a chat request cut short; nil prints vllm-omni's plain
	// request_id=<E2E.RequestID>.
	identity *timingIdentity
}

// stageSpan is a stage's first and last wall time within a turn (vllm-omni's stage_first_ts and
// stage_last_ts); its wall time counts only when both are set.
type stageSpan struct {
	first, last       float64
	hasFirst, hasLast bool
}

// logTables renders a record's tables and logs them at info level: each table as one entry
// whose message starts with "\n" (as vllm-omni does) and the [OmniTiming] line, or, structured,
// one record per table (logRecords). A nil log logs nothing. It returns the rendering.
func logTables(log *zap.Logger, r *FinalizedRequest, structured bool) summary {
	s := r.tableSummary()
	if log == nil {
		return s
	}
	if structured {
		logRecords(log, s, r.tables.identity)
		return s
	}
	for _, e := range s.Entries {
		if strings.HasPrefix(e, omniTimingPrefix) {
			log.Info(e)
		} else {
			log.Info("\n" + e)
		}
	}
	return s
}

const omniTimingPrefix = "[OmniTiming] "

// tableSummary renders the record's --log-stats tables: the Overall Summary, then its
// RequestE2EStats, [OmniTiming] line, StageRequestStats, TransferEdgeStats and ToolCallStats.
// It is a function of the record alone.
func (r *FinalizedRequest) tableSummary() summary {
	var s summary
	var nonZero []kv
	for _, row := range r.overallRows() {
		if !row.val.zero {
			nonZero = append(nonZero, row)
		}
	}
	if len(nonZero) > 0 {
		for _, row := range nonZero {
			s.Overall = append(s.Overall, summaryRow{Key: row.key, Value: row.num})
		}
		s.Entries = append(s.Entries, renderKV("Overall Summary", nonZero))
	}
	rs := r.requestSection()
	s.Request = rs.requestSummary
	s.Entries = append(s.Entries, rs.entries...)
	return s
}

// overallRows are vllm-omni's Overall Summary over the one request the record closes.
func (r *FinalizedRequest) overallRows() []kv {
	in := &r.tables
	wallMs := max(0, (in.wallEnd-in.wallStart)*1000)
	tokens := r.E2E.E2ETotalTokens
	var avgTokPerS float64
	if wallMs > 0 {
		avgTokPerS = float64(tokens) * 1000 / wallMs
	}
	rows := []kv{
		{"e2e_requests", intCell(1), 1},
		{"e2e_wall_time_ms", floatCell(wallMs), wallMs},
		{"e2e_total_tokens", intCell(tokens), float64(tokens)},
		{"e2e_avg_time_per_request_ms", floatCell(wallMs), wallMs},
		{"e2e_avg_tokens_per_s", floatCell(avgTokPerS), avgTokPerS},
	}
	// input_preprocess_time_ms: the first row's preprocess_ms (vllm-omni: the mean over requests).
	if len(r.Stages) > 0 {
		if v, ok := r.Stages[0].PipelineTimings["preprocess_ms"]; ok {
			rows = append(rows, kv{"input_preprocess_time_ms", floatCell(v), v})
		}
	}
	for i, sp := range in.stageSpans {
		var w float64
		if sp.hasFirst && sp.hasLast {
			w = (sp.last - sp.first) * 1000
		}
		rows = append(rows, kv{"e2e_stage_" + strconv.Itoa(i) + "_wall_time_ms", floatCell(w), w})
	}
	return rows
}

type requestSection struct {
	requestSummary
	entries []string
}

// title is a table's title: its kind and the record's identity.
func (r *FinalizedRequest) title(kind string) string {
	rid := r.E2E.RequestID
	id := r.tables.identity
	if id == nil {
		return kind + " [request_id=" + rid + "]"
	}
	req := id.Req
	if req == "" {
		req = rid
	}
	var b strings.Builder
	b.WriteString(kind + " [request_id=" + req)
	writeIdentity(&b, id)
	b.WriteByte(']')
	return b.String()
}

func writeIdentity(b *strings.Builder, id *timingIdentity) {
	if id.Response != "" {
		b.WriteString(" response=" + id.Response)
	}
	if id.Turn >= 0 {
		b.WriteString(" turn=" + strconv.Itoa(id.Turn))
	}
	if id.Reason != "" {
		b.WriteString(" reason=" + id.Reason)
	}
}

func (r *FinalizedRequest) requestSection() requestSection {
	e2e := r.E2E
	rs := requestSection{requestSummary: requestSummary{RequestID: e2e.RequestID, E2E: e2e, ToolCalls: r.ToolCalls}}
	evs := slices.Clone(r.Stages)
	slices.SortStableFunc(evs, func(x, y StageRequestStats) int { return x.StageID - y.StageID })
	rs.Stages = evs
	sorted := slices.Clone(r.Transfers)
	slices.SortStableFunc(sorted, func(x, y TransferEdgeStats) int {
		if x.FromStage != y.FromStage {
			return x.FromStage - y.FromStage
		}
		return x.ToStage - y.ToStage
	})
	rs.Transfers = sorted

	// 1. RequestE2EStats.
	rows := []kv{
		{key: "e2e_total_ms", val: floatCell(e2e.E2ETotalMs)},
		{key: "e2e_total_tokens", val: intCell(e2e.E2ETotalTokens)},
		{key: "transfers_total_kbytes", val: floatCell(float64(e2e.TransfersTotalBytes) / 1024.0)},
		{key: "transfers_total_time_ms", val: floatCell(e2e.TransfersTotalTimeMs)},
	}
	if slices.ContainsFunc(rows, func(r kv) bool { return !r.val.zero }) {
		rows = append(rows, e2eExtraRows(e2e)...)
		slices.SortStableFunc(rows, func(x, y kv) int { return strings.Compare(x.key, y.key) })
		rs.entries = append(rs.entries, renderKV(r.title("RequestE2EStats"), rows))
	}
	// 2. [OmniTiming] (the edges in first-use order, as vllm-omni lists them).
	rs.OmniTiming = r.omniTiming(evs)
	rs.entries = append(rs.entries, rs.OmniTiming)
	// 3. StageRequestStats.
	if t, ok := renderStageTable(r.title("StageRequestStats"), evs); ok {
		rs.entries = append(rs.entries, t)
	}
	// 4. TransferEdgeStats.
	if t, ok := renderTransferTable(r.title("TransferEdgeStats"), sorted); ok {
		rs.entries = append(rs.entries, t)
	}
	// 5. ToolCallStats (omniserve only, docs/STATS.md): only for a turn with calls.
	if t, ok := renderToolCallTable(r.title("ToolCallStats"), rs.ToolCalls); ok {
		rs.entries = append(rs.entries, t)
	}
	return rs
}

// omniTiming builds the one-line [OmniTiming] summary in vllm-omni's format. With an identity
// and no preprocess time (every duplex turn) total= and engine= are left out, as vllm-omni does.
// evs are the record's rows sorted by stage; the pipeline timings are the last one's.
func (r *FinalizedRequest) omniTiming(evs []StageRequestStats) string {
	e2e, edges := r.E2E, r.Transfers
	var pt map[string]float64
	if len(evs) > 0 {
		pt = evs[len(evs)-1].PipelineTimings
	}
	var b strings.Builder
	b.WriteString(omniTimingPrefix + "req=")
	id := r.tables.identity
	if id != nil && id.Req != "" {
		b.WriteString(id.Req)
	} else {
		b.WriteString(e2e.RequestID)
	}
	if id != nil {
		writeIdentity(&b, id)
	}
	pre, hasPre := pt["preprocess_ms"]
	skipTotal := id != nil && !hasPre
	if !skipTotal {
		b.WriteString(" total=" + strconv.FormatFloat(e2e.E2ETotalMs/1000, 'f', 2, 64) + "s")
	}
	if hasPre {
		b.WriteString(" preprocess=" + strconv.FormatFloat(pre/1000, 'f', 2, 64) + "s")
	}
	if !skipTotal {
		b.WriteString(" engine=" + strconv.FormatFloat((e2e.E2ETotalMs-pre)/1000, 'f', 2, 64) + "s")
	}
	// Empty lists are left out, as vllm-omni does (it formats them only when non-empty).
	if len(evs) > 0 {
		b.WriteString(" stages=[")
		for i, ev := range evs {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(ev.StageID) + ":" + strconv.FormatFloat(ev.StageGenTimeMs/1000, 'f', 2, 64) + "s")
		}
		b.WriteByte(']')
	}
	if len(edges) > 0 {
		b.WriteString(" transfers=[")
		for i, e := range edges {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(e.FromStage) + "->" + strconv.Itoa(e.ToStage) + "=" +
				strconv.FormatFloat(e.TxTimeMs, 'f', 2, 64) + "ms")
		}
		b.WriteByte(']')
	}
	if v, ok := pt["ar2diffusion_ms"]; ok {
		b.WriteString(" ar2diffusion=" + strconv.FormatFloat(v, 'f', 2, 64) + "ms")
	}
	return b.String()
}

// renderStageTable renders one column per stage event (already sorted by stage) and one row per
// shown field, sorted by name; rows that are zero in every column are dropped.
func renderStageTable(title string, evs []StageRequestStats) (string, bool) {
	if len(evs) == 0 {
		return "", false
	}
	anyDiffusion := slices.ContainsFunc(evs, func(e StageRequestStats) bool { return len(e.DiffusionMetrics) > 0 })
	cols := make([]map[string]cell, len(evs))
	names := map[string]struct{}{}
	headers := make([]string, len(evs))
	for c := range evs {
		ev := &evs[c]
		headers[c] = strconv.Itoa(ev.StageID)
		m := make(map[string]cell, len(stageFields))
		for i := range stageFields {
			fd := &stageFields[i]
			if fd.excluded || (anyDiffusion && fd.name == fieldPostprocess) {
				continue
			}
			switch fd.kind {
			case kindInt:
				m[fd.name] = intCell(int64(*fd.i(ev)))
			case kindFloat:
				m[fd.name] = floatCell(*fd.f(ev))
			case kindString:
				m[fd.name] = optStringCell(*fd.s(ev))
			case kindList:
				m[fd.name] = listCell(*fd.l(ev))
			case kindMap:
				// diffusion_metrics expands into one row per key; the dict row itself is removed.
				for k, v := range *fd.m(ev) {
					m[k] = floatCell(v)
				}
				continue
			case kindStageRef:
				continue
			}
			names[fd.name] = struct{}{}
		}
		for k := range ev.DiffusionMetrics {
			names[k] = struct{}{}
		}
		cols[c] = m
	}
	var rows [][]string
	for _, name := range slices.Sorted(maps.Keys(names)) {
		row := make([]string, 0, len(cols)+1)
		row = append(row, name)
		keep := false
		for _, col := range cols {
			cl, ok := col[name]
			if !ok {
				cl = emptyCell
			}
			keep = keep || !cl.zero
			row = append(row, cl.text)
		}
		if keep {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return "", false
	}
	return renderTable(title, append([]string{"Field"}, uniqueHeaders(headers)...), rows), true
}

// renderTransferTable renders one column per edge "<from>-><to>" (sorted by from, to).
func renderTransferTable(title string, edges []TransferEdgeStats) (string, bool) {
	if len(edges) == 0 {
		return "", false
	}
	defs := []fieldDef[TransferEdgeStats]{
		// omniserve-only (docs/STATS.md): time blocked on a full queue, kept out of tx_time_ms.
		{"backpressure_time_ms", func(e TransferEdgeStats) cell { return floatCell(e.BackpressureTimeMs) }},
		{"in_flight_time_ms", func(e TransferEdgeStats) cell { return floatCell(e.InFlightTimeMs) }},
		{"rx_decode_time_ms", func(e TransferEdgeStats) cell { return floatCell(e.RxDecodeTimeMs) }},
		{"size_kbytes", func(e TransferEdgeStats) cell { return floatCell(float64(e.SizeBytes) / 1024.0) }},
		{"tx_time_ms", func(e TransferEdgeStats) cell { return floatCell(e.TxTimeMs) }},
	}
	headers := make([]string, 0, len(edges)+1)
	headers = append(headers, "Field")
	for _, e := range edges {
		headers = append(headers, strconv.Itoa(e.FromStage)+"->"+strconv.Itoa(e.ToStage))
	}
	rows := fieldRows(defs, edges)
	if len(rows) == 0 {
		return "", false
	}
	hs := append(headers[:1:1], uniqueHeaders(headers[1:])...)
	return renderTable(title, hs, rows), true
}

// e2eExtraRows are the omniserve-only RequestE2EStats rows (docs/STATS.md); each is printed only
// when known (non-zero), so a chat table keeps vllm-omni's four rows.
func e2eExtraRows(e RequestE2EStats) []kv {
	var rows []kv
	add := func(key string, v float64) {
		if v > 0 {
			rows = append(rows, kv{key: key, val: floatCell(v), num: v})
		}
	}
	add("audio_delivered_s", e.AudioDeliveredS)
	add("audio_played_s", e.AudioPlayedS)
	add("audio_underrun_s", e.AudioUnderrunS)
	add("delivery_total_ms", e.DeliveryTotalMs)
	add("delivery_detached_ms", e.DeliveryDetachedMs)
	add("input_ms", e.InputMs)
	add("input_end_to_first_audio_ms", e.InputEndToFirstAudioMs)
	add("input_end_to_first_text_ms", e.InputEndToFirstTextMs)
	return rows
}
