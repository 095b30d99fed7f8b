package stage

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
)

// A schema with every kind the grammar bounds: free strings, an enum, integers, numbers,
// booleans, a nested object with an optional property, an array of strings, a nullable field.
const testToolSchema = `{
  "type": "object",
  "properties": {
    "order_number": {"type": "string", "description": "the order"},
    "urgency": {"type": "string", "enum": ["low", "high"]},
    "count": {"type": "integer", "minimum": 0},
    "price": {"type": "number"},
    "gift": {"type": "boolean"},
    "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}, "zip": {"type": "string"}}, "required": ["city"], "additionalProperties": false},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
    "note": {"type": ["string", "null"]}
  },
  "required": ["order_number", "urgency", "count", "price", "gift", "address", "tags", "note"],
  "additionalProperties": false
}`

func testTools() []duplex.Tool {
	return []duplex.Tool{
		{Name: "lookup_order", Description: "Look up an order.", Parameters: json.RawMessage(testToolSchema)},
		{Name: "get_time", Description: "The time now."},
		{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}`)},
	}
}

func TestToolCallGrammarErrors(t *testing.T) {
	tests := []struct {
		name, schema string
		want         string
	}{
		{"not an object type", `{"type":"string"}`, "type object"},
		{"not JSON", `{"type":`, "JSON schema object"},
		{"recursive ref", `{"type":"object","properties":{"n":{"$ref":"#/$defs/node"}},"$defs":{"node":{"type":"object","properties":{"next":{"$ref":"#/$defs/node"}}}}}`, "recursive"},
		{"unknown ref", `{"type":"object","properties":{"n":{"$ref":"#/$defs/x"}}}`, "does not name"},
		{"required not a property", `{"type":"object","properties":{},"required":["a"]}`, "not in properties"},
		{"unknown type", `{"type":"object","properties":{"a":{"type":"date"}}}`, "unknown type"},
		{"empty enum", `{"type":"object","properties":{"a":{"enum":[]}}}`, "admits nothing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := toolCallGrammar(toolFormatHermes, []duplex.Tool{{Name: "f", Parameters: json.RawMessage(tt.schema)}}, "", 1000, true, false)
			require.ErrorIs(t, err, errToolSchema)
			require.ErrorContains(t, err, tt.want)
		})
	}
	_, err := toolCallGrammar(toolFormatHermes, testTools(), "lookup_order", 40, true, false)
	require.ErrorIs(t, err, duplex.ErrToolBudget)
	_, err = toolCallGrammar(toolFormatHermes, testTools(), "nope", 1000, true, false)
	require.ErrorIs(t, err, errToolSchema)
}

// TestToolCallGrammarsCompile: every family's forced and lazy grammars compile in llama.cpp, and
// a $ref schema is followed.
func TestToolCallGrammarsCompile(t *testing.T) {
	eng := loadEngine(t)
	tools := append(testTools(), duplex.Tool{Name: "refs", Parameters: json.RawMessage(
		`{"type":"object","properties":{"p":{"$ref":"#/definitions/pt"}},"required":["p"],"definitions":{"pt":{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}},"required":["x","y"]}}}`)})
	for _, f := range []toolFormat{toolFormatHermes, toolFormatLlama3, toolFormatMistral} {
		for _, opener := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/opener=%v", f, opener), func(t *testing.T) {
				g, err := toolCallGrammar(f, tools, "", 4000, opener, true)
				require.NoError(t, err)
				s := gpu.Sampling{Temperature: 1, TopP: 1, Grammar: g}
				require.NoError(t, eng.CheckSampling(&s), g)
			})
		}
	}
}

// TestForcedToolCallComplete is the forced call's promise: with a random-weight model, for 100
// of 100 seeds, the call finishes before max_tokens and its arguments are valid against the
// schema; also at the smallest max_tokens the grammar accepts.
func TestForcedToolCallComplete(t *testing.T) {
	eng := loadEngine(t)
	tools := testTools()
	var schema map[string]any
	require.NoError(t, json.Unmarshal([]byte(testToolSchema), &schema))
	smallest := 0
	for n := 1; n < 4000; n++ {
		if _, err := toolCallGrammar(toolFormatHermes, tools, "lookup_order", n-1, true, false); err == nil {
			smallest = n
			break
		}
	}
	require.NotZero(t, smallest)
	for _, maxTokens := range []int{400, smallest} {
		g, err := toolCallGrammar(toolFormatHermes, tools, "lookup_order", maxTokens-1, true, false)
		require.NoError(t, err)
		for seed := range 100 {
			seq, err := eng.Open(context.Background(), gpu.SeqOptions{})
			require.NoError(t, err)
			_, err = seq.AppendText(context.Background(), "user: where is my order?\nassistant:")
			require.NoError(t, err)
			var text strings.Builder
			res, err := seq.Generate(context.Background(), gpu.GenerateOptions{MaxTokens: maxTokens,
				Sampling: &gpu.Sampling{Temperature: 1, TopP: 1, Seed: uint32(seed), Grammar: g}},
				func(p gpu.Piece) error { text.WriteString(p.Text); return nil })
			seq.Close()
			require.NoError(t, err)
			require.Equal(t, duplex.FinishStop, res.FinishReason, "max_tokens %d seed %d: %q", maxTokens, seed, text.String())
			content, calls := scripted(toolFormatHermes, false, []string{text.String()})
			require.Empty(t, content)
			require.Len(t, calls, 1, text.String())
			require.Equal(t, "lookup_order", calls[0].Name)
			var args any
			require.NoError(t, json.Unmarshal([]byte(calls[0].Arguments), &args))
			require.NoError(t, validateSchema(schema, args), "seed %d: %s", seed, calls[0].Arguments)
		}
	}
}

// validateSchema checks v against the JSON-schema subset the test schemas use.
func validateSchema(s map[string]any, v any) error {
	if c, ok := s["const"]; ok && !jsonEqual(c, v) {
		return fmt.Errorf("%v is not the const %v", v, c)
	}
	if e, ok := s["enum"].([]any); ok && !slices.ContainsFunc(e, func(x any) bool { return jsonEqual(x, v) }) {
		return fmt.Errorf("%v is not in the enum %v", v, e)
	}
	var types []string
	switch t := s["type"].(type) {
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			types = append(types, x.(string))
		}
	}
	if len(types) > 0 && !slices.ContainsFunc(types, func(t string) bool { return hasType(t, v) }) {
		return fmt.Errorf("%v (%T) is not of type %v", v, v, types)
	}
	switch x := v.(type) {
	case string:
		n := utf8.RuneCountInString(x)
		if m, ok := s["maxLength"].(float64); ok && n > int(m) {
			return fmt.Errorf("%q is longer than %v", x, m)
		}
		if m, ok := s["minLength"].(float64); ok && n < int(m) {
			return fmt.Errorf("%q is shorter than %v", x, m)
		}
	case float64:
		if m, ok := s["minimum"].(float64); ok && x < m {
			return fmt.Errorf("%v is below %v", x, m)
		}
	case []any:
		if m, ok := s["maxItems"].(float64); ok && len(x) > int(m) {
			return fmt.Errorf("%d items, more than %v", len(x), m)
		}
		if items, ok := s["items"].(map[string]any); ok {
			for _, it := range x {
				if err := validateSchema(items, it); err != nil {
					return err
				}
			}
		}
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		for _, r := range asSlice(s["required"]) {
			if _, ok := x[r.(string)]; !ok {
				return fmt.Errorf("missing required %q", r)
			}
		}
		for k, val := range x {
			ps, ok := props[k].(map[string]any)
			if !ok {
				if s["additionalProperties"] == false {
					return fmt.Errorf("unexpected property %q", k)
				}
				continue
			}
			if err := validateSchema(ps, val); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
	}
	return nil
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

func hasType(t string, v any) bool {
	switch t {
	case "string":
		_, ok := v.(string)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == math.Trunc(f)
	case "number":
		_, ok := v.(float64)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "null":
		return v == nil
	case "array":
		_, ok := v.([]any)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	}
	return false
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
