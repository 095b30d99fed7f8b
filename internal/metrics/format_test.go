package metrics

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFormatValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"int zero", formatInt(0), "0"},
		{"int small", formatInt(999), "999"},
		{"int thousands", formatInt(1234), "1,234"},
		{"int millions", formatInt(1234567), "1,234,567"},
		{"int negative", formatInt(-1234567), "-1,234,567"},
		{"float", formatFloat(1234.5678), "1,234.568"},
		{"float small", formatFloat(0.0004), "0.000"},
		{"float negative", formatFloat(-98765.4321), "-98,765.432"},
		{"float big", formatFloat(1757000000), "1,757,000,000.000"},
		{"nan", formatFloat(math.NaN()), "nan"},
		{"inf", formatFloat(math.Inf(1)), "inf"},
		{"bool", boolText(true) + boolText(false), "TrueFalse"},
		{"list", listCell([]float64{7.8, 8.0}).text, "7.900 (n=2)"},
		{"nil list", listCell(nil).text, "None"},
		{"empty list", listCell([]float64{}).text, ""},
		{"none string", optStringCell("").text, "None"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.got)
		})
	}
}

func TestZeroCells(t *testing.T) {
	t.Parallel()
	require.True(t, intCell(0).zero)
	require.True(t, floatCell(0).zero)
	require.True(t, floatCell(math.Copysign(0, -1)).zero)
	require.True(t, optStringCell("").zero)
	require.True(t, listCell(nil).zero)
	require.True(t, listCell([]float64{}).zero, "empty list counts as zero (documented deviation)")
	require.False(t, listCell([]float64{0}).zero)
	require.False(t, floatCell(0.0001).zero)
}

func TestRenderEmptyAndHeaders(t *testing.T) {
	t.Parallel()
	require.Equal(t, "[T] <empty>", renderTable("T", []string{"Field", "Value"}, nil))
	require.Equal(t, "[T] <empty>", renderKV("T", []kv{{key: "a", val: intCell(0)}}))
	require.Equal(t, []string{"0", "0_2", "1", "0_3"}, uniqueHeaders([]string{"0", "0", "1", "0"}))
	require.Equal(t, "[T]\n+-------+-------+\n| Field | Value |\n+-------+-------+\n| a     |     1 |\n+-------+-------+",
		renderKV("T", []kv{{key: "a", val: intCell(1)}, {key: "b", val: floatCell(0)}}))
}
