package session

// The effects of tools: a call's arguments streaming in, an MCP call's progress, an MCP
// server's tool listing.

// CallArguments are a tool call's arguments: PhaseDelta (Text is new text) or PhaseDone (Text
// is all of them). MCP: the call goes to an MCP server (no CallID or Name on the wire then).
type CallArguments struct {
	Phase                      Phase
	MCP                        bool
	ResponseID, ItemID, CallID string
	Name                       string
	OutputIndex                int
	Text                       string
}

// MCPCall is an MCP call's progress: PhaseInProgress, PhaseCompleted or PhaseFailed.
type MCPCall struct {
	Phase       Phase
	OutputIndex int
	ItemID      string
}

// MCPListTools is an MCP server's tool listing (the item ItemID): PhaseInProgress,
// PhaseCompleted or PhaseFailed.
type MCPListTools struct {
	Phase  Phase
	ItemID string
}

func (CallArguments) effect() {}
func (MCPCall) effect()       {}
func (MCPListTools) effect()  {}
