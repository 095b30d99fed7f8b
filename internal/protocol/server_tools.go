package protocol

// The function call and MCP events. The session's tools.go, mcp.go and mcp_call.go still build
// these as maps (byte for byte these shapes); clients decode them into these types.

// ResponseFunctionCallArgumentsDelta is response.function_call_arguments.delta.
type ResponseFunctionCallArgumentsDelta struct {
	CallID      string `json:"call_id"`
	Delta       string `json:"delta"`
	ItemID      string `json:"item_id"`
	OutputIndex int    `json:"output_index"`
	ResponseID  string `json:"response_id"`
}

// EventType implements ServerEvent.
func (ResponseFunctionCallArgumentsDelta) EventType() string {
	return "response.function_call_arguments.delta"
}

// ResponseFunctionCallArgumentsDone is response.function_call_arguments.done.
type ResponseFunctionCallArgumentsDone struct {
	Arguments   string `json:"arguments"`
	CallID      string `json:"call_id"`
	ItemID      string `json:"item_id"`
	Name        string `json:"name"`
	OutputIndex int    `json:"output_index"`
	ResponseID  string `json:"response_id"`
}

// EventType implements ServerEvent.
func (ResponseFunctionCallArgumentsDone) EventType() string {
	return "response.function_call_arguments.done"
}

// MCPListToolsInProgress is mcp_list_tools.in_progress.
type MCPListToolsInProgress struct {
	ItemID string `json:"item_id"`
}

// EventType implements ServerEvent.
func (MCPListToolsInProgress) EventType() string { return "mcp_list_tools.in_progress" }

// MCPListToolsCompleted is mcp_list_tools.completed.
type MCPListToolsCompleted struct {
	ItemID string `json:"item_id"`
}

// EventType implements ServerEvent.
func (MCPListToolsCompleted) EventType() string { return "mcp_list_tools.completed" }

// MCPListToolsFailed is mcp_list_tools.failed.
type MCPListToolsFailed struct {
	ItemID string `json:"item_id"`
}

// EventType implements ServerEvent.
func (MCPListToolsFailed) EventType() string { return "mcp_list_tools.failed" }

// ResponseMCPCallArgumentsDelta is response.mcp_call_arguments.delta.
type ResponseMCPCallArgumentsDelta struct {
	Delta       string `json:"delta"`
	ItemID      string `json:"item_id"`
	OutputIndex int    `json:"output_index"`
	ResponseID  string `json:"response_id"`
}

// EventType implements ServerEvent.
func (ResponseMCPCallArgumentsDelta) EventType() string { return "response.mcp_call_arguments.delta" }

// ResponseMCPCallArgumentsDone is response.mcp_call_arguments.done.
type ResponseMCPCallArgumentsDone struct {
	Arguments   string `json:"arguments"`
	ItemID      string `json:"item_id"`
	OutputIndex int    `json:"output_index"`
	ResponseID  string `json:"response_id"`
}

// EventType implements ServerEvent.
func (ResponseMCPCallArgumentsDone) EventType() string { return "response.mcp_call_arguments.done" }

// ResponseMCPCallInProgress is response.mcp_call.in_progress.
type ResponseMCPCallInProgress struct {
	ItemID      string `json:"item_id"`
	OutputIndex int    `json:"output_index"`
}

// EventType implements ServerEvent.
func (ResponseMCPCallInProgress) EventType() string { return "response.mcp_call.in_progress" }

// ResponseMCPCallCompleted is response.mcp_call.completed.
type ResponseMCPCallCompleted struct {
	ItemID      string `json:"item_id"`
	OutputIndex int    `json:"output_index"`
}

// EventType implements ServerEvent.
func (ResponseMCPCallCompleted) EventType() string { return "response.mcp_call.completed" }

// ResponseMCPCallFailed is response.mcp_call.failed.
type ResponseMCPCallFailed struct {
	ItemID      string `json:"item_id"`
	OutputIndex int    `json:"output_index"`
}

// EventType implements ServerEvent.
func (ResponseMCPCallFailed) EventType() string { return "response.mcp_call.failed" }
