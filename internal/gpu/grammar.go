package gpu

import (
	"encoding/json"

	"github.com/ollama/ollama/llama"
)

// JSONGrammar is llama.cpp's grammars/json.gbnf: any JSON object (OpenAI's json_object mode
// asks for an object at the top level).
const JSONGrammar = `root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4})
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

ws ::= | " " | "\n" [ \t]{0,20}
`

// SchemaGrammar converts a JSON schema to a GBNF grammar with llama.cpp's converter
// (json-schema-to-grammar, the one its server uses for response_format). Errors are
// *SamplingError naming response_format.
func SchemaGrammar(schema []byte) (string, error) {
	if !json.Valid(schema) {
		return "", &SamplingError{Param: "response_format", Detail: "json_schema.schema is not valid JSON"}
	}
	g := llama.SchemaToGrammar(schema)
	if len(g) == 0 {
		return "", &SamplingError{Param: "response_format", Detail: "json_schema.schema could not be converted to a grammar (unsupported or invalid JSON schema)"}
	}
	return string(g), nil
}
