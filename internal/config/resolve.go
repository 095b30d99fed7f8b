package config

import (
	"os"

	"github.com/omniserve/omniserve/configs"
)

// EmbeddedPath names the built-in copy of DefaultPath in Config.Path and in errors.
const EmbeddedPath = "embedded:" + configs.DefaultName

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// FlagValue is one command-line flag the user set explicitly, by flag name, as text.
type FlagValue struct {
	Name, Value string
}

// Sources are the inputs of Resolve.
type Sources struct {
	// ConfigFlag is the --config value; ConfigFlagSet says the user gave it. An empty path means
	// "no file": defaults, environment and flags only.
	ConfigFlag    string
	ConfigFlagSet bool
	// Lookup reads the environment (os.LookupEnv); nil means an empty environment.
	Lookup func(string) (string, bool)
	// Flags are the flags set on the command line, in any order.
	Flags []FlagValue
}

// Resolve builds the configuration: defaults, then the YAML file, then OMNISERVE_* variables,
// then flags, then Validate. Every error is an *Error with a one-line message.
func Resolve(src Sources) (Config, error) {
	lookup := src.Lookup
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	path, chosen := DefaultPath, false
	if v, ok := lookup(EnvPrefix + "CONFIG"); ok {
		path, chosen = v, true
	}
	if src.ConfigFlagSet {
		path, chosen = src.ConfigFlag, true
	}
	c := Defaults()
	switch {
	case path == "":
	case !chosen && !fileExists(path):
		// The default file is not beside the process (a binary run outside the repository or a
		// release tree): the same file, embedded at build time.
		if err := parse(EmbeddedPath, configs.Default(), &c); err != nil {
			return Config{}, err
		}
		c.Path = EmbeddedPath
	default:
		if err := LoadFile(path, &c); err != nil {
			return Config{}, err
		}
	}
	if err := ApplyEnv(&c, lookup); err != nil {
		return Config{}, err
	}
	for _, f := range src.Flags {
		k, ok := LookupFlag(f.Name)
		if !ok {
			continue // flags that are not settings, such as --config itself
		}
		if err := k.Set(&c, f.Value, "flag --"+f.Name); err != nil {
			return Config{}, err
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}
