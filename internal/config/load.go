package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"gopkg.in/yaml.v3"
)

// sections are the top-level YAML keys. `pipeline` is owned by internal/stage and kept as a node.
var sections = map[string]bool{"server": true, "engine": true, "realtime": true, "pipeline": true}

// LoadFile reads the YAML file at path into c, over whatever c already holds. Every server and
// engine value goes through the same parser as flags and environment variables, so a value is
// accepted or rejected the same way wherever it comes from. Unknown keys are errors.
func LoadFile(path string, c *Config) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Error{Source: path, Msg: "config file not found (set --config or OMNISERVE_CONFIG)", Err: err}
	}
	if err != nil {
		return &Error{Source: path, Msg: "reading config file: " + err.Error(), Err: err}
	}
	if err := parse(path, data, c); err != nil {
		return err
	}
	c.Path = path
	return nil
}

func parse(path string, data []byte, c *Config) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return &Error{Source: path, Msg: "invalid YAML: " + oneLine(err.Error()), Err: err}
	}
	if len(doc.Content) == 0 { // empty file: defaults only
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return &Error{Source: at(path, root), Msg: "top level must be a mapping of server, engine, realtime and pipeline"}
	}
	byName := make(map[string]Key, len(keys))
	for _, k := range keys {
		byName[k.Name] = k
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		name, val := root.Content[i], root.Content[i+1]
		if !sections[name.Value] {
			return &Error{Source: at(path, name), Msg: fmt.Sprintf("unknown key %q (want server, engine, realtime or pipeline)", name.Value)}
		}
		if seen[name.Value] {
			return &Error{Source: at(path, name), Msg: fmt.Sprintf("duplicate key %q", name.Value)}
		}
		seen[name.Value] = true
		if name.Value == "pipeline" {
			c.Pipeline = *val
			continue
		}
		if val.Kind == yaml.ScalarNode && val.Tag == "!!null" {
			continue // "server:" with nothing under it
		}
		if val.Kind != yaml.MappingNode {
			return &Error{Source: at(path, val), Msg: fmt.Sprintf("%s must be a mapping", name.Value)}
		}
		if err := parseSection(path, name.Value, val, byName, c); err != nil {
			return err
		}
	}
	return nil
}

func parseSection(path, section string, m *yaml.Node, byName map[string]Key, c *Config) error {
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		kn, vn := m.Content[i], m.Content[i+1]
		full := section + "." + kn.Value
		k, ok := byName[full]
		if !ok {
			return &Error{Source: at(path, kn), Msg: fmt.Sprintf("unknown key %q", full)}
		}
		if seen[full] {
			return &Error{Source: at(path, kn), Msg: fmt.Sprintf("duplicate key %q", full)}
		}
		seen[full] = true
		if vn.Kind != yaml.ScalarNode {
			return &Error{Source: at(path, vn), Msg: fmt.Sprintf("%s must be a single value", full)}
		}
		v := vn.Value
		if vn.Tag == "!!null" {
			v = ""
		}
		if err := k.Set(c, v, at(path, vn)); err != nil {
			return err
		}
	}
	return nil
}

func at(path string, n *yaml.Node) string { return fmt.Sprintf("%s:%d", path, n.Line) }

// oneLine keeps a multi-line parser message on the single line the CLI prints.
func oneLine(s string) string {
	out := make([]rune, 0, len(s))
	for _, r := range s {
		if r == '\n' {
			r = ' '
		}
		out = append(out, r)
	}
	return string(out)
}
