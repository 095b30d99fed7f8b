package api

// Version and Commit identify the build. The Makefile sets them with
// -ldflags "-X github.com/omniserve/omniserve/internal/api.Version=... -X ...Commit=...".
// They are variables only because the linker can set nothing else; nothing writes them at run time.
var (
	Version = "dev"
	Commit  = "unknown"
)
