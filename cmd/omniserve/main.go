// Command omniserve serves omni speech models: OpenAI-compatible chat completions and a
// full-duplex realtime WebSocket. See README.md.
package main

import "os"

func main() {
	os.Exit(execute(os.Args[1:], newApp()))
}
