package metrics

import (
	"strconv"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// logRecords logs a rendered record as structured records, one per table (and one for the
// [OmniTiming] line), in the text order. Each record's message is the table's kind
// ("Overall Summary", "RequestE2EStats", "OmniTiming", "StageRequestStats",
// "TransferEdgeStats", "ToolCallStats"); its fields are the table's rows (the same rows the text table shows)
// plus the ids: request_id, and for a duplex turn response_id, turn and reason.
func logRecords(log *zap.Logger, s summary, id *timingIdentity) {
	ids := func(rid string) []zap.Field {
		req := rid
		if id != nil && id.Req != "" {
			req = id.Req
		}
		f := []zap.Field{zap.String("request_id", req)}
		if id != nil {
			if id.Response != "" {
				f = append(f, zap.String("response_id", id.Response))
			}
			if id.Turn >= 0 {
				f = append(f, zap.Int("turn", id.Turn))
			}
			if id.Reason != "" {
				f = append(f, zap.String("reason", id.Reason))
			}
		}
		return f
	}
	rs := s.Request
	if len(s.Overall) > 0 {
		f := ids(rs.RequestID)
		for _, r := range s.Overall {
			f = append(f, zap.Float64(r.Key, r.Value))
		}
		log.Info("Overall Summary", f...)
	}
	e := rs.E2E
	f := ids(rs.RequestID)
	f = append(f,
		zap.Float64("e2e_total_ms", e.E2ETotalMs),
		zap.Int64("e2e_total_tokens", e.E2ETotalTokens),
		zap.Float64("transfers_total_kbytes", float64(e.TransfersTotalBytes)/1024),
		zap.Float64("transfers_total_time_ms", e.TransfersTotalTimeMs))
	for _, r := range e2eExtraRows(e) {
		f = append(f, zap.Float64(r.key, r.num))
	}
	log.Info("RequestE2EStats", f...)
	f = ids(rs.RequestID)
	if id == nil {
		f = append(f, zap.Float64("total_s", e.E2ETotalMs/1000))
	}
	stages := make(map[string]float64, len(rs.Stages))
	for _, st := range rs.Stages {
		stages[strconv.Itoa(st.StageID)] = st.StageGenTimeMs / 1000
	}
	edges := make(map[string]float64, len(rs.Transfers))
	for _, e := range rs.Transfers {
		edges[edgeName(e)] = e.TxTimeMs
	}
	if len(stages) > 0 {
		f = append(f, zap.Any("stages_s", stages))
	}
	if len(edges) > 0 {
		f = append(f, zap.Any("transfers_tx_ms", edges))
	}
	f = append(f, zap.String("line", rs.OmniTiming))
	log.Info("OmniTiming", f...)
	if cols := stageColumns(rs.Stages); len(cols) > 0 {
		log.Info("StageRequestStats", append(ids(rs.RequestID), zap.Array("stages", cols))...)
	}
	if len(rs.Transfers) > 0 {
		log.Info("TransferEdgeStats", append(ids(rs.RequestID), zap.Array("edges", edgeColumns(rs.Transfers)))...)
	}
	logToolCallRecord(log, ids(rs.RequestID), rs.ToolCalls)
}

func edgeName(e TransferEdgeStats) string {
	return strconv.Itoa(e.FromStage) + "->" + strconv.Itoa(e.ToStage)
}

// stageColumns is one object per stage column with the rows the text table shows (a row is
// shown when any column is non-zero).
type stageColumnsArr []StageRequestStats

func stageColumns(evs []StageRequestStats) stageColumnsArr { return evs }

func (cols stageColumnsArr) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	shown := map[string]bool{}
	for i := range stageFields {
		fd := &stageFields[i]
		if fd.excluded || fd.kind == kindMap || fd.kind == kindStageRef {
			continue
		}
		for c := range cols {
			if !stageCell(fd, &cols[c]).zero {
				shown[fd.name] = true
			}
		}
	}
	for c := range cols {
		ev := &cols[c]
		err := enc.AppendObject(zapcore.ObjectMarshalerFunc(func(o zapcore.ObjectEncoder) error {
			o.AddInt("stage_id", ev.StageID)
			for i := range stageFields {
				fd := &stageFields[i]
				if !shown[fd.name] {
					continue
				}
				switch fd.kind {
				case kindInt:
					o.AddInt(fd.name, *fd.i(ev))
				case kindFloat:
					o.AddFloat64(fd.name, *fd.f(ev))
				case kindString:
					o.AddString(fd.name, *fd.s(ev))
				case kindList:
					o.AddFloat64(fd.name, mean(*fd.l(ev)))
				default:
				}
			}
			for k, v := range ev.DiffusionMetrics {
				o.AddFloat64(k, v)
			}
			return nil
		}))
		if err != nil {
			return err
		}
	}
	return nil
}

func stageCell(fd *stageField, ev *StageRequestStats) cell {
	switch fd.kind {
	case kindInt:
		return intCell(int64(*fd.i(ev)))
	case kindFloat:
		return floatCell(*fd.f(ev))
	case kindString:
		return optStringCell(*fd.s(ev))
	case kindList:
		return listCell(*fd.l(ev))
	default:
		return emptyCell
	}
}

type edgeColumnsArr []TransferEdgeStats

func edgeColumns(es []TransferEdgeStats) edgeColumnsArr { return es }

func (cols edgeColumnsArr) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, e := range cols {
		err := enc.AppendObject(zapcore.ObjectMarshalerFunc(func(o zapcore.ObjectEncoder) error {
			o.AddString("edge", edgeName(e))
			o.AddFloat64("backpressure_time_ms", e.BackpressureTimeMs)
			o.AddFloat64("in_flight_time_ms", e.InFlightTimeMs)
			o.AddFloat64("rx_decode_time_ms", e.RxDecodeTimeMs)
			o.AddFloat64("size_kbytes", float64(e.SizeBytes)/1024)
			o.AddFloat64("tx_time_ms", e.TxTimeMs)
			return nil
		}))
		if err != nil {
			return err
		}
	}
	return nil
}
