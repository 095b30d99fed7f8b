package config

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Render writes c as the YAML file that would reproduce it: every server, engine and realtime key of the
// key table (in table order within each section) and the pipeline section as given. A set API
// key is shown as "<redacted>": the output is meant for logs and bug reports.
func Render(c Config) ([]byte, error) {
	sections := map[string]*yaml.Node{}
	root := &yaml.Node{Kind: yaml.MappingNode}
	for _, name := range []string{"server", "engine", "realtime"} {
		m := &yaml.Node{Kind: yaml.MappingNode}
		sections[name] = m
		root.Content = append(root.Content, scalar(name), m)
	}
	for _, k := range keys {
		section, leaf, _ := strings.Cut(k.Name, ".")
		v := k.Value(&c)
		if k.Name == "server.api_key" && v != "" {
			v = "<redacted>"
		}
		val := scalar(fmt.Sprint(v))
		switch x := v.(type) {
		case string:
			val.Style = yaml.DoubleQuotedStyle
		case time.Duration:
			val.Value = x.String()
		}
		sections[section].Content = append(sections[section].Content, scalar(leaf), val)
	}
	if c.Pipeline.Kind != 0 {
		p := c.Pipeline
		root.Content = append(root.Content, scalar("pipeline"), &p)
	}
	var buf bytes.Buffer
	if c.Path != "" {
		fmt.Fprintf(&buf, "# effective configuration; file: %s\n", c.Path)
	} else {
		buf.WriteString("# effective configuration; no file (defaults, environment and flags)\n")
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("rendering config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("rendering config: %w", err)
	}
	return buf.Bytes(), nil
}

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }
