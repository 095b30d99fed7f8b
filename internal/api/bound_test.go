package api

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/jsonbound"
)

// nestedSchema is a JSON schema of n nested arrays, the shape that overflowed llama.cpp's
// schema_to_grammar (issue 40): {"type":"array","items":{"type":"array","items":...}}.
func nestedSchema(n int) string {
	return strings.Repeat(`{"type":"array","items":`, n) + `{"type":"string"}` + strings.Repeat("}", n)
}

// nestedObject is a parameters schema of n nested objects, each with one property.
func nestedObject(n int) string {
	return strings.Repeat(`{"type":"object","properties":{"a":`, n) + `{"type":"string"}` + strings.Repeat("}}", n)
}

func chatCfg() *ChatConfig {
	cfg := ChatConfig{Models: []string{"m"}}
	cfg.withDefaults()
	return &cfg
}

const boundMsgs = `"messages":[{"role":"user","content":"hi"}]`

func responseFormatBody(schema string) string {
	return `{"model":"m",` + boundMsgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + schema + `}}}`
}

func toolsBody(params string) string {
	return `{"model":"m",` + boundMsgs + `,"tools":[{"type":"function","function":{"name":"f","parameters":` + params + `}}]}`
}

// A schema over jsonbound.Schema is refused with a 400 naming the parameter, in microseconds,
// before cgo or the grammar walk sees it.
func TestChatSchemaBound(t *testing.T) {
	t.Parallel()
	cfg := chatCfg()
	wide := `{"type":"object","properties":{` + strings.Repeat(`"p":{"type":"string"},`, 13000) + `"q":{"type":"string"}}}`
	tests := []struct {
		name, body, param, code string
	}{
		{"response_format 4990 levels", responseFormatBody(nestedSchema(4990)), "response_format.json_schema.schema", "invalid_value"},
		{"response_format 9000 levels", responseFormatBody(nestedSchema(9000)), "response_format.json_schema.schema", "invalid_value"},
		{"response_format 70 levels", responseFormatBody(nestedSchema(70)), "response_format.json_schema.schema", "invalid_value"},
		{"response_format too long", responseFormatBody(wide), "response_format.json_schema.schema", "invalid_value"},
		{"tool 4990 levels", toolsBody(nestedObject(4990)), "tools[0].function.parameters", "invalid_value"},
		// 18,000 JSON levels: encoding/json's own bound (10,000) refuses the body first.
		{"tool 9000 levels", toolsBody(nestedObject(9000)), "", "invalid_json"},
		{"tool too long", toolsBody(`{"type":"object","description":"` + strings.Repeat("x", 300<<10) + `"}`), "tools[0].function.parameters", "invalid_value"},
		{"tool 40 levels", toolsBody(nestedObject(40)), "tools[0].function.parameters", "invalid_value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			_, e := parseChatRequest([]byte(tt.body), cfg, nil)
			require.NotNil(t, e)
			require.Equal(t, 400, e.Status)
			require.Equal(t, tt.param, e.Param, e.Message)
			require.Equal(t, tt.code, e.Code, e.Message)
			require.Less(t, time.Since(start), time.Second)
		})
	}
	// Within the bound: a schema OpenAI accepts (10 levels) still becomes a grammar.
	p, e := parseChatRequest([]byte(responseFormatBody(nestedSchema(10))), cfg, nil)
	require.Nil(t, e)
	require.Contains(t, p.Req.Sampling.Grammar, "root")
	_, e = parseChatRequest([]byte(toolsBody(nestedObject(5))), cfg, nil)
	require.Nil(t, e)
}

// fuzzChatSchema holds one entry point to the bound: whatever the schema, parsing returns (no
// crash, no hang), and a schema over the bound is refused naming param.
func fuzzChatSchema(f *testing.F, body func(string) string, param string) {
	for _, s := range []string{`{}`, `{"type":"object"}`, nestedSchema(3), nestedObject(3), nestedSchema(70), nestedObject(70),
		`{"type":"object","properties":{"a":{"$ref":"#/$defs/a"}},"$defs":{"a":{"type":"string"}}}`, `[`, `"x"`} {
		f.Add(s)
	}
	cfg := chatCfg()
	f.Fuzz(func(t *testing.T, schema string) {
		_, e := parseChatRequest([]byte(body(schema)), cfg, nil)
		if jsonbound.Check([]byte(schema), jsonbound.Schema) != nil {
			require.NotNil(t, e)
			require.Equal(t, 400, e.Status)
		}
	})
}

func FuzzChatResponseFormat(f *testing.F) {
	fuzzChatSchema(f, responseFormatBody, "response_format.json_schema.schema")
}

func FuzzChatTools(f *testing.F) {
	fuzzChatSchema(f, toolsBody, "tools[0].function.parameters")
}
