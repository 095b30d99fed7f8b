package session

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
)

// The follow-up response the session starts after MCP results (and the response of an
// approved call) is the session's own response, so it carries the session's declared tools
// and tool_choice, as an engine-started response does: its function tools next to the listed
// MCP tools, whatever the response that made the call offered; a forcing choice is relaxed to
// auto (it would force the call again) and "none" stays none.
func TestFollowUpCarriesTheSessionTools(t *testing.T) {
	lookup := duplex.Tool{Name: "lookup_order"}
	tests := []struct {
		name      string
		choice    *ToolChoice // session.tool_choice
		wantTools []string
		wantMode  string
	}{
		{"session auto", nil, []string{"lookup_order", "add", "block"}, duplex.ToolChoiceAuto},
		{"session required is relaxed", &ToolChoice{Mode: duplex.ToolChoiceRequired},
			[]string{"lookup_order", "add", "block"}, duplex.ToolChoiceAuto},
		{"session forces a function: relaxed", &ToolChoice{Mode: duplex.ToolChoiceFunction, Function: "lookup_order"},
			[]string{"lookup_order", "add", "block"}, duplex.ToolChoiceAuto},
		{"session none stays none", &ToolChoice{Mode: duplex.ToolChoiceNone}, nil, "-"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eng := &callEngine{t: t, args: `{"a":2,"b":3}`}
			s, sk, wait := callSession(t, eng, "never")
			require.NoError(t, s.Submit(context.Background(), &UpdateSession{Patch: ConfigPatch{
				ToolsSet: true, Tools: []duplex.Tool{lookup}, ToolChoice: tc.choice,
				MCPTools: s.settings.cfg.MCP}}))
			sk.until(t, "session.updated")
			require.NoError(t, s.Submit(context.Background(), forceMCP("add")))
			sk.until(t, "response.mcp_call.completed")
			sk.until(t, "response.done")
			sk.until(t, "response.created") // the follow-up
			sk.until(t, "response.done")
			s.Stop(ReasonClientClose)
			require.Equal(t, ReasonClientClose, wait())
			eng.mu.Lock()
			defer eng.mu.Unlock()
			require.Len(t, eng.tools, 2)
			require.Equal(t, tc.wantTools, eng.tools[1], "the follow-up's tools")
			require.Equal(t, tc.wantMode, eng.choices[1], "the follow-up's tool_choice")
		})
	}
}
