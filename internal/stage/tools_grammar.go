package stage

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/omniserve/omniserve/internal/duplex"
)

// The tool-call grammar is built here, not by llama.cpp's json-schema-to-grammar, because a
// forced call must finish as well as parse: a free string (or array, or object) may go on until
// max_tokens runs out, and a random-weight model's strings never close on their own. Every
// string, array and number of this grammar is bounded, and the bounds shrink until the longest
// call the grammar admits fits the room the reply has. Each generated token adds at least one
// byte (a grammar never admits an empty control token), so a grammar of at most n bytes ends
// within n tokens, plus one for the end of generation.

// errToolSchema reports a tool's parameters schema the tool grammar cannot follow.
var errToolSchema = errors.New("unsupported tool parameters schema")

// toolGrammarLimits are the bounds of one attempt, largest first.
var toolGrammarLimits = []struct{ str, items int }{
	{128, 8}, {64, 6}, {32, 4}, {16, 3}, {8, 2}, {4, 1}, {1, 1}, {0, 1}, {0, 0},
}

// maxSchemaDepth bounds $ref chains and nesting (a recursive schema cannot be bounded).
const maxSchemaDepth = 12

// gbnfSp is an optional space after ':' and ',' (what real models write); it counts as one byte.
const gbnfSp = `" "?`

// toolCallGrammar returns the GBNF grammar (start rule "root") of a reply that calls one of
// tools (only the one named only, when set) in format f, whose longest sentence is at most
// budget bytes. withOpener starts it at the call's opener (a forced call); without it, the grammar
// is what follows the opener once a lazy trigger fired. parallel admits up to four calls.
func toolCallGrammar(f toolFormat, tools []duplex.Tool, only string, budget int, withOpener, parallel bool) (string, error) {
	var sel []duplex.Tool
	for _, t := range tools {
		if only == "" || t.Name == only {
			sel = append(sel, t)
		}
	}
	if len(sel) == 0 {
		return "", fmt.Errorf("%w: no tool named %q", errToolSchema, only)
	}
	calls := 1
	if parallel && !withOpener {
		calls = 4
	}
	var lastErr error
	for _, lim := range toolGrammarLimits {
		g := &gbnf{strMax: lim.str, itemsMax: lim.items, rules: map[string]string{}}
		callMax, err := g.callRule(f, sel)
		if err != nil {
			return "", err
		}
		root, total := callsRoot(f, callMax, calls, withOpener)
		if total > budget {
			lastErr = fmt.Errorf("%w: the longest call is %d bytes, %d tokens are left", duplex.ErrToolBudget, total, budget)
			continue
		}
		g.rules["root"] = root
		return g.String(), nil
	}
	return "", lastErr
}

// callRule sets the grammar's call rule, one call of any of tools, and returns the length of
// the longest call.
func (g *gbnf) callRule(f toolFormat, tools []duplex.Tool) (callMax int, err error) {
	alts := make([]string, len(tools))
	for i, t := range tools {
		args, n, err := g.toolArgs(t)
		if err != nil {
			return 0, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		name, _ := json.Marshal(t.Name)
		key := strconv.Quote(f.argsKey())
		head := `{"name":` + string(name) + `,` + key + `:`
		alts[i] = gbnfLit(`{"name":`) + " " + gbnfSp + " " + gbnfLit(string(name)+",") + " " + gbnfSp + " " +
			gbnfLit(key+":") + " " + gbnfSp + " " + args + " " + gbnfLit("}")
		callMax = max(callMax, len(head)+3+n+1)
	}
	g.rules["call"] = strings.Join(alts, " | ")
	return callMax, nil
}

// callsRoot is the root rule of up to calls calls in format f's markup (with its opener when
// withOpener) and the length of its longest output.
func callsRoot(f toolFormat, callMax, calls int, withOpener bool) (root string, total int) {
	switch f {
	case toolFormatHermes:
		one := gbnfLit("\n") + " call " + gbnfLit("\n"+hermesClose)
		root, total = one, 1+callMax+1+len(hermesClose)
		if calls > 1 {
			more := gbnfLit("\n"+hermesOpen+"\n") + " call " + gbnfLit("\n"+hermesClose)
			root = one + " (" + more + "){0," + strconv.Itoa(calls-1) + "}"
			total += (calls - 1) * (len(hermesOpen) + 2 + callMax + 1 + len(hermesClose))
		}
		if withOpener {
			root, total = gbnfLit(hermesOpen)+" "+root, total+len(hermesOpen)
		}
	case toolFormatMistral:
		root, total = gbnfLit("[")+" call ", 1+callMax
		if calls > 1 {
			root += "(" + gbnfLit(",") + " " + gbnfSp + " call){0," + strconv.Itoa(calls-1) + "} "
			total += (calls - 1) * (2 + callMax)
		}
		root, total = root+gbnfLit("]"), total+1
		if withOpener {
			root, total = gbnfLit(mistralOpen)+" "+root, total+len(mistralOpen)
		}
	case toolFormatLlama3:
		root, total = "call", callMax
	}
	return root, total
}

// gbnf accumulates the rules of one grammar.
type gbnf struct {
	strMax, itemsMax int
	rules            map[string]string
	defs             map[string]any // the root schema's $defs / definitions
	n                int
}

func (g *gbnf) String() string {
	names := make([]string, 0, len(g.rules))
	for k := range g.rules {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("root ::= " + g.rules["root"] + "\n")
	for _, k := range names {
		if k != "root" {
			b.WriteString(k + " ::= " + g.rules[k] + "\n")
		}
	}
	b.WriteString(`char ::= [^"\\\x7F\x00-\x1F] | "\\" ["\\/bfnrt]` + "\n")
	return b.String()
}

// rule names an expression, so that repeated uses share it.
func (g *gbnf) rule(expr string) string {
	g.n++
	name := "r" + strconv.Itoa(g.n)
	g.rules[name] = expr
	return name
}

// toolArgs is the expression of a tool's arguments object and its longest length.
func (g *gbnf) toolArgs(t duplex.Tool) (string, int, error) {
	if len(t.Parameters) == 0 {
		return gbnfLit("{}"), 2, nil
	}
	v, err := decodeOrdered(t.Parameters)
	schema, ok := v.(map[string]any)
	if err != nil || !ok {
		return "", 0, fmt.Errorf("%w: parameters must be a JSON schema object", errToolSchema)
	}
	g.defs = map[string]any{}
	for _, k := range []string{"$defs", "definitions"} {
		if d, ok := schema[k].(map[string]any); ok {
			for name, v := range d {
				g.defs["#/"+k+"/"+name] = v
			}
		}
	}
	if typ, ok := schema["type"]; ok && typ != "object" {
		return "", 0, fmt.Errorf("%w: parameters must have type object, not %v", errToolSchema, typ)
	}
	return g.value(schema, 0)
}

// value is the expression of any schema and its longest length in bytes.
func (g *gbnf) value(s map[string]any, depth int) (string, int, error) {
	if depth > maxSchemaDepth {
		return "", 0, fmt.Errorf("%w: nested deeper than %d levels (a recursive $ref cannot be bounded)", errToolSchema, maxSchemaDepth)
	}
	switch k := schemaKeyword(s); k {
	case "$ref":
		ref := s["$ref"].(string)
		d, ok := g.defs[ref].(map[string]any)
		if !ok {
			return "", 0, fmt.Errorf("%w: $ref %q does not name a $defs or definitions entry", errToolSchema, ref)
		}
		return g.value(d, depth+1)
	case "const":
		return literal(s["const"])
	case "enum":
		return g.alternatives(s["enum"].([]any), func(v any) (string, int, error) { return literal(v) })
	case "anyOf", "oneOf":
		return g.alternatives(s[k].([]any), func(v any) (string, int, error) {
			m, ok := v.(map[string]any)
			if !ok {
				return "", 0, fmt.Errorf("%w: %s entries must be schemas", errToolSchema, k)
			}
			return g.value(m, depth+1)
		})
	case "allOf":
		all := s["allOf"].([]any)
		if len(all) != 1 {
			return "", 0, fmt.Errorf("%w: allOf with more than one schema", errToolSchema)
		}
		m, ok := all[0].(map[string]any)
		if !ok {
			return "", 0, fmt.Errorf("%w: allOf entries must be schemas", errToolSchema)
		}
		return g.value(m, depth+1)
	}
	return g.byType(s, depth)
}

// schemaKeyword is the keyword that decides a schema before its type, in this order: a $ref,
// a const, an enum, anyOf or oneOf, allOf ("" none).
func schemaKeyword(s map[string]any) string {
	if _, ok := s["$ref"].(string); ok {
		return "$ref"
	}
	if _, ok := s["const"]; ok {
		return "const"
	}
	for _, k := range []string{"enum", "anyOf", "oneOf", "allOf"} {
		if _, ok := s[k].([]any); ok {
			return k
		}
	}
	return ""
}

// byType is the grammar of a schema by its type: one, a list of alternatives, or none given
// (an object or array by its keywords, else any bounded scalar).
func (g *gbnf) byType(s map[string]any, depth int) (string, int, error) {
	switch t := s["type"].(type) {
	case string:
		return g.typed(t, s, depth)
	case []any:
		return g.alternatives(t, func(v any) (string, int, error) {
			name, ok := v.(string)
			if !ok {
				return "", 0, fmt.Errorf("%w: type must be a string or an array of strings", errToolSchema)
			}
			return g.typed(name, s, depth)
		})
	case nil:
		if _, ok := s["properties"]; ok {
			return g.typed("object", s, depth)
		}
		if _, ok := s["items"]; ok {
			return g.typed("array", s, depth)
		}
		// Any value: a bounded scalar.
		return g.alternatives([]any{"string", "number", "boolean", "null"}, func(v any) (string, int, error) {
			return g.typed(v.(string), map[string]any{}, depth)
		})
	default:
		return "", 0, fmt.Errorf("%w: type must be a string or an array of strings", errToolSchema)
	}
}

func (g *gbnf) alternatives(vs []any, each func(any) (string, int, error)) (string, int, error) {
	if len(vs) == 0 {
		return "", 0, fmt.Errorf("%w: an empty enum, anyOf, oneOf or type list admits nothing", errToolSchema)
	}
	exprs := make([]string, len(vs))
	longest := 0
	for i, v := range vs {
		e, n, err := each(v)
		if err != nil {
			return "", 0, err
		}
		exprs[i], longest = e, max(longest, n)
	}
	return "(" + strings.Join(exprs, " | ") + ")", longest, nil
}

func (g *gbnf) typed(t string, s map[string]any, depth int) (string, int, error) {
	switch t {
	case "string":
		lo, hi := intKey(s, "minLength", 0), g.strMax
		if m, ok := s["maxLength"]; ok {
			hi = min(hi, intOf(m))
		}
		hi = max(hi, lo)
		// A character is at most 4 bytes of UTF-8 or a 2-byte escape (\u escapes are left out).
		return g.rule(`"\"" char{` + strconv.Itoa(lo) + "," + strconv.Itoa(hi) + `} "\""`), 2 + 4*hi, nil
	case "integer":
		if lo, ok := s["minimum"].(float64); ok && lo >= 1 {
			return g.rule(`[1-9] [0-9]{0,15}`), 16, nil
		}
		if lo, ok := s["minimum"].(float64); ok && lo >= 0 {
			return g.rule(`([0-9] | [1-9] [0-9]{0,15})`), 16, nil
		}
		return g.rule(`"-"? ([0-9] | [1-9] [0-9]{0,15})`), 17, nil
	case "number":
		return g.rule(`"-"? ([0-9] | [1-9] [0-9]{0,15}) ("." [0-9]{1,8})?`), 26, nil
	case "boolean":
		return `("true" | "false")`, 5, nil
	case "null":
		return `"null"`, 4, nil
	case "array":
		return g.array(s, depth)
	case "object":
		return g.object(s, depth)
	}
	return "", 0, fmt.Errorf("%w: unknown type %q", errToolSchema, t)
}

func (g *gbnf) array(s map[string]any, depth int) (string, int, error) {
	item, itemMax := `""`, 0
	switch it := s["items"].(type) {
	case map[string]any:
		e, n, err := g.value(it, depth+1)
		if err != nil {
			return "", 0, err
		}
		item, itemMax = e, n
	case nil:
		e, n, err := g.value(map[string]any{}, depth+1)
		if err != nil {
			return "", 0, err
		}
		item, itemMax = e, n
	default:
		return "", 0, fmt.Errorf("%w: items must be one schema (tuples are not supported)", errToolSchema)
	}
	lo, hi := intKey(s, "minItems", 0), g.itemsMax
	if m, ok := s["maxItems"]; ok {
		hi = min(hi, intOf(m))
	}
	hi = max(hi, lo)
	longest := 2 + hi*itemMax + max(hi-1, 0)*2
	if hi == 0 {
		return gbnfLit("[]"), 2, nil
	}
	rest := "(" + gbnfLit(",") + " " + gbnfSp + " " + item + "){" + strconv.Itoa(max(lo-1, 0)) + "," + strconv.Itoa(hi-1) + "}"
	body := item + " " + rest
	if lo == 0 {
		body = "(" + body + ")?"
	}
	return g.rule(gbnfLit("[") + " " + body + " " + gbnfLit("]")), longest, nil
}

// object admits the required properties in declared order, then the optional ones in order,
// each at most once; no other keys (additional properties are never needed to be valid).
func (g *gbnf) object(s map[string]any, depth int) (string, int, error) {
	props, _ := s["properties"].(map[string]any)
	required, err := requiredProps(s, props)
	if err != nil {
		return "", 0, err
	}
	names := propertyOrder(props)
	if len(names) == 0 {
		return gbnfLit("{}"), 2, nil
	}
	req, opt, err := g.properties(props, names, required, depth)
	if err != nil {
		return "", 0, err
	}
	return g.objectRule(req, opt)
}

// requiredProps is the set of an object schema's required properties, each one of props.
func requiredProps(s, props map[string]any) (map[string]bool, error) {
	required := map[string]bool{}
	r, ok := s["required"].([]any)
	if !ok {
		return required, nil
	}
	for _, k := range r {
		name, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("%w: required must list property names", errToolSchema)
		}
		if _, ok := props[name]; !ok {
			return nil, fmt.Errorf("%w: required property %q is not in properties", errToolSchema, name)
		}
		required[name] = true
	}
	return required, nil
}

// gbnfProp is one property's `"key": value` grammar and the length of its longest output.
type gbnfProp struct {
	expr string
	n    int
}

// properties are the grammars of an object's properties in order, required and optional.
func (g *gbnf) properties(props map[string]any, names []string, required map[string]bool, depth int) (req, opt []gbnfProp, err error) {
	for _, name := range names {
		ps, ok := props[name].(map[string]any)
		if !ok {
			if b, isBool := props[name].(bool); !isBool || !b {
				return nil, nil, fmt.Errorf("%w: property %q must be a schema", errToolSchema, name)
			}
			ps = map[string]any{}
		}
		e, n, err := g.value(ps, depth+1)
		if err != nil {
			return nil, nil, err
		}
		key, _ := json.Marshal(name)
		one := gbnfProp{gbnfLit(string(key)+":") + " " + gbnfSp + " " + e, len(key) + 2 + n}
		if required[name] {
			req = append(req, one)
		} else {
			opt = append(opt, one)
		}
	}
	return req, opt, nil
}

// objectRule is an object of the required properties in order, then any in-order choice of the
// optional ones.
func (g *gbnf) objectRule(req, opt []gbnfProp) (string, int, error) {
	var parts []string
	longest := 2
	sep := gbnfLit(",") + " " + gbnfSp + " "
	for i, p := range req {
		if i > 0 {
			parts = append(parts, sep)
			longest += 2
		}
		parts = append(parts, p.expr)
		longest += p.n
	}
	// tail(i): a non-empty in-order choice of optional properties i.. ; each optional property
	// appears at most once, so the object stays bounded.
	tail := ""
	for i := len(opt) - 1; i >= 0; i-- {
		if tail == "" {
			tail = g.rule(opt[i].expr)
		} else {
			tail = g.rule(opt[i].expr + " (" + sep + tail + ")? | " + tail)
		}
	}
	for _, p := range opt {
		longest += p.n + 2
	}
	if tail != "" {
		if len(req) > 0 {
			parts = append(parts, "("+sep+tail+")?")
		} else {
			parts = append(parts, tail+"?")
		}
	}
	return g.rule(gbnfLit("{") + " " + strings.Join(parts, " ") + " " + gbnfLit("}")), longest, nil
}

// propertyOrder is the properties' order in the schema's JSON text when known (Go maps lose it;
// decodeOrdered records it), else alphabetical.
func propertyOrder(props map[string]any) []string {
	if o, ok := props[orderKey].([]any); ok {
		out := make([]string, len(o))
		for i, k := range o {
			out[i], _ = k.(string)
		}
		return out
	}
	names := make([]string, 0, len(props))
	for k := range props {
		if k != orderKey {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return names
}

// orderKey is where decodeSchema records the order of an object's properties.
const orderKey = "\x00order"

// literal is a JSON value as a GBNF literal.
func literal(v any) (string, int, error) {
	b, err := json.Marshal(withoutOrder(v))
	if err != nil {
		return "", 0, fmt.Errorf("%w: %v", errToolSchema, err)
	}
	return gbnfLit(string(b)), len(b), nil
}

// gbnfLit quotes s as a GBNF string literal.
func gbnfLit(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range s {
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if c < 0x20 {
				fmt.Fprintf(&b, `\x%02X`, c)
			} else {
				b.WriteRune(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

func intKey(s map[string]any, k string, def int) int {
	if v, ok := s[k]; ok {
		return intOf(v)
	}
	return def
}

func intOf(v any) int {
	f, ok := v.(float64)
	if !ok || math.IsNaN(f) || f < 0 {
		return 0
	}
	return int(min(f, 1<<20))
}

// decodeOrdered decodes JSON like json.Unmarshal into any, and records each object's key order
// under orderKey (a key no JSON text can hold... other than by escaping NUL, which a schema's
// keywords never do), so that properties are generated in the order the schema lists them.
func decodeOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the schema")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return decodeObject(dec)
		case '[':
			return decodeArray(dec)
		}
	case json.Number:
		f, err := t.Float64()
		if err != nil {
			return nil, err
		}
		return f, nil
	}
	return tok, nil
}

// decodeObject decodes an object's members after its '{', recording the keys' order.
func decodeObject(dec *json.Decoder) (any, error) {
	m := map[string]any{}
	var order []any
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := kt.(string)
		v, err := decodeValue(dec)
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; !dup {
			order = append(order, k)
		}
		m[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	m[orderKey] = order
	return m, nil
}

// decodeArray decodes an array's items after its '['.
func decodeArray(dec *json.Decoder) (any, error) {
	var a []any
	for dec.More() {
		v, err := decodeValue(dec)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if a == nil {
		a = []any{}
	}
	return a, nil
}

// withoutOrder drops decodeOrdered's order records from a decoded value.
func withoutOrder(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			if k != orderKey {
				out[k] = withoutOrder(x)
			}
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = withoutOrder(x)
		}
		return out
	}
	return v
}
