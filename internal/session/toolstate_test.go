package session

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
)

// give: the engine gets the tools once per change and once per new engine; a spec that could
// not be queued is sent again.
func TestToolStateGive(t *testing.T) {
	e1, e2 := &fakeToolEngine{name: "e1"}, &fakeToolEngine{name: "e2"}
	add := &duplex.ToolSpec{Tools: []duplex.Tool{{Name: "add"}}, Choice: duplex.ToolChoiceAuto}
	sub := &duplex.ToolSpec{Tools: []duplex.Tool{{Name: "sub"}}, Choice: duplex.ToolChoiceAuto}
	var ts toolState
	steps := []struct {
		name     string
		eng      Engine
		spec     *duplex.ToolSpec
		lost     bool // the job was not queued (notGiven)
		wantGive bool
	}{
		{"a new engine without tools gets nothing", e1, nil, false, false},
		{"tools set", e1, add, false, true},
		{"unchanged", e1, add, false, false},
		{"changed", e1, sub, true, true},
		{"after a lost job: again", e1, sub, false, true},
		{"a new engine gets them", e2, sub, false, true},
		{"cleared", e2, nil, false, true},
		{"still none", e2, nil, false, false},
	}
	for _, st := range steps {
		require.Equal(t, st.wantGive, ts.give(st.eng, st.spec), st.name)
		if st.lost {
			ts.notGiven()
		}
	}
}

type fakeToolEngine struct {
	Engine
	name string
}

// retire: a server the configuration dropped or changed is cancelled and forgotten; an
// unchanged one (its index aside) stays; new ones are returned for listing, in order.
func TestToolStateRetire(t *testing.T) {
	a := MCPTool{ServerLabel: "a", ServerURL: "http://a", Index: 0}
	b := MCPTool{ServerLabel: "b", ServerURL: "http://b", Index: 1}
	b2 := MCPTool{ServerLabel: "b", ServerURL: "http://b2", Index: 1}
	c := MCPTool{ServerLabel: "c", ServerURL: "http://c", Index: 2}
	tests := []struct {
		name      string
		have      []MCPTool
		want      []MCPTool
		fresh     []string // labels to list
		cancelled []string // labels whose listing was cancelled
	}{
		{"none", nil, nil, nil, nil},
		{"all new", nil, []MCPTool{a, b}, []string{"a", "b"}, nil},
		{"unchanged, moved", []MCPTool{a, b}, []MCPTool{b, withIndex(a, 5)}, nil, nil},
		{"one dropped", []MCPTool{a, b}, []MCPTool{a}, nil, []string{"b"}},
		{"one changed, one added", []MCPTool{a, b}, []MCPTool{a, b2, c}, []string{"b", "c"}, []string{"b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ts toolState
			ts.open()
			defer ts.close()
			var cancelled []string
			for _, tool := range tc.have {
				label := tool.ServerLabel
				ts.mcp.servers[label] = &mcpServer{tool: tool, cancel: func() { cancelled = append(cancelled, label) }}
			}
			var fresh []string
			for _, tool := range ts.retire(tc.want) {
				fresh = append(fresh, tool.ServerLabel)
			}
			require.Equal(t, tc.fresh, fresh)
			require.ElementsMatch(t, tc.cancelled, cancelled)
			for _, tool := range tc.want {
				if _, listed := ts.mcp.servers[tool.ServerLabel]; !listed {
					require.Contains(t, fresh, tool.ServerLabel)
				}
			}
		})
	}
}

func withIndex(t MCPTool, i int) MCPTool { t.Index = i; return t }

// open / close: close stops what open started and drops the results nobody read.
func TestToolStateOpenClose(t *testing.T) {
	var ts toolState
	ts.open()
	ctx := ts.mcp.ctx
	ts.mcp.results <- mcpResult{label: "a"}
	ts.close()
	require.ErrorIs(t, ctx.Err(), context.Canceled)
	require.Empty(t, ts.mcp.results)
	require.Nil(t, ts.mcp.servers)
}

// The spec the engine is given is the JSON of the tools: a change in a schema is a change.
func TestToolStateGiveSchema(t *testing.T) {
	var ts toolState
	eng := &fakeToolEngine{}
	spec := func(schema string) *duplex.ToolSpec {
		return &duplex.ToolSpec{Tools: []duplex.Tool{{Name: "f", Parameters: json.RawMessage(schema)}}}
	}
	require.True(t, ts.give(eng, spec(`{"type":"object"}`)))
	require.False(t, ts.give(eng, spec(`{"type":"object"}`)))
	require.True(t, ts.give(eng, spec(`{"type":"object","properties":{}}`)))
}
