package metrics

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFieldTableCoversEveryField fails when a StageRequestStats field has no row in stageFields,
// a row is out of dataclass order, a row lacks a merge rule, or a row's accessor points at a
// different field: the reference silently dropped keys without a rule. reflect is used here only,
// to enumerate the struct.
func TestFieldTableCoversEveryField(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeFor[StageRequestStats]()
	require.Equal(t, typ.NumField(), len(stageFields), "every field needs exactly one row")
	for i := range typ.NumField() {
		sf := typ.Field(i)
		fd := stageFields[i]
		name := sf.Tag.Get("stats")
		require.NotEmpty(t, name, "field %s has no stats tag", sf.Name)
		require.Equal(t, name, fd.name, "row %d is out of dataclass order", i)
		require.NotEqual(t, mergeUnset, fd.merge, "field %s has no merge rule", name)

		// The accessor must read and write this very field.
		var m StageRequestStats
		v := reflect.ValueOf(&m).Elem().Field(i)
		switch fd.kind {
		case kindInt:
			require.Equal(t, reflect.Int, sf.Type.Kind(), name)
			v.SetInt(int64(1000 + i))
			require.Equal(t, 1000+i, *fd.i(&m), name)
		case kindFloat:
			require.Equal(t, reflect.Float64, sf.Type.Kind(), name)
			v.SetFloat(float64(i) + 0.5)
			require.InDelta(t, float64(i)+0.5, *fd.f(&m), 0, name)
		case kindString:
			require.Equal(t, reflect.String, sf.Type.Kind(), name)
			v.SetString(name)
			require.Equal(t, name, *fd.s(&m))
		case kindList:
			v.Set(reflect.ValueOf([]float64{float64(i)}))
			require.Equal(t, []float64{float64(i)}, *fd.l(&m), name)
		case kindMap:
			v.Set(reflect.ValueOf(map[string]float64{name: 1}))
			require.Equal(t, map[string]float64{name: 1}, *fd.m(&m), name)
		case kindStageRef:
			ss := &stageStats{TotalToken: i}
			v.Set(reflect.ValueOf(ss))
			require.Same(t, ss, *fd.ref(&m), name)
		default:
			t.Fatalf("field %s has no kind", name)
		}
		if fd.merge == mergeMeanOfList {
			require.Equal(t, kindList, stageFields[fd.meanOf].kind, "%s must average a list", name)
		}
		if fd.merge == mergeSum || fd.merge == mergeFirstPositive {
			require.Contains(t, []fieldKind{kindInt, kindFloat}, fd.kind, name)
		}
	}
}

// TestExcludedFieldsMatchReference pins the reference's STAGE_EXCLUDE: the fields never shown as
// table rows.
func TestExcludedFieldsMatchReference(t *testing.T) {
	t.Parallel()
	var got []string
	for _, fd := range stageFields {
		if fd.excluded {
			got = append(got, fd.name)
		}
	}
	require.ElementsMatch(t, []string{"stage_stats", "stage_id", "request_id", "rx_transfer_bytes",
		"rx_decode_time_ms", "rx_in_flight_time_ms", "final_output_type", "finish_reason", "pipeline_timings"}, got)
}

func TestCloneIsDeep(t *testing.T) {
	t.Parallel()
	m := StageRequestStats{StageStats: &stageStats{TotalToken: 1}, VllmItlsMs: []float64{1},
		InterOutputLatenciesMs: []float64{2}, DiffusionMetrics: map[string]float64{"a": 1},
		PipelineTimings: map[string]float64{"preprocess_ms": 1}}
	c := m.clone()
	m.StageStats.TotalToken = 9
	m.VllmItlsMs[0] = 9
	m.InterOutputLatenciesMs[0] = 9
	m.DiffusionMetrics["a"] = 9
	m.PipelineTimings["preprocess_ms"] = 9
	require.Equal(t, 1, c.StageStats.TotalToken)
	require.Equal(t, []float64{1}, c.VllmItlsMs)
	require.Equal(t, []float64{2}, c.InterOutputLatenciesMs)
	require.InDelta(t, 1.0, c.DiffusionMetrics["a"], 0)
	require.InDelta(t, 1.0, c.PipelineTimings["preprocess_ms"], 0)
}
