package session

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
)

// TestCheckForcedBudget: a response's own max_output_tokens is held to the call the session's
// tool_choice forces, and only then.
func TestCheckForcedBudget(t *testing.T) {
	tools := []duplex.Tool{{Name: "lookup_order", Parameters: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`)}}
	required := ToolChoice{Mode: duplex.ToolChoiceRequired}
	tests := []struct {
		name   string
		choice ToolChoice
		max    *int
		limit  int
		refuse bool
	}{
		{"forced, too small", required, ptr(2), 2, true},
		{"forced function, too small", ToolChoice{Mode: duplex.ToolChoiceFunction, Function: "lookup_order"}, ptr(2), 2, true},
		{"forced, room enough", required, ptr(4096), 4096, false},
		{"forced, no max of its own", required, nil, 2, false},
		{"auto", ToolChoice{Mode: duplex.ToolChoiceAuto}, ptr(2), 2, false},
		{"none", ToolChoice{Mode: duplex.ToolChoiceNone}, ptr(2), 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fe := checkForcedBudget(tools, tt.choice, tt.max, tt.limit)
			if !tt.refuse {
				require.Nil(t, fe)
				return
			}
			require.NotNil(t, fe)
			require.Equal(t, "invalid_value", fe.Code)
			require.Equal(t, "response.max_output_tokens", fe.Param)
			require.Contains(t, fe.Message, "too small for a complete forced call")
		})
	}
}
