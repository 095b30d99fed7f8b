package api

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/omniserve/omniserve/internal/oaierror"
)

// corsExposed are the response headers a page on another origin may read: Location carries the
// call id of POST /v1/realtime/calls (OpenAI's browser SDK reads it), Retry-After the back-off
// of a 429/503, X-Request-Id the id to quote in a bug report.
const corsExposed = "Location, Retry-After, " + RequestIDHeader

// cors answers browsers on other origins. OpenAI's WebRTC guide calls /v1/realtime/calls and
// /v1/realtime/client_secrets from the app's own page, so the preflight must succeed without a
// key (browsers never send Authorization on it) and every response, 401s included, must carry
// Access-Control-Allow-Origin, or the page sees an opaque network error instead of the JSON
// error. Auth is by bearer token, never cookies, so credentials are not allowed and "*" is safe.
// origins holds exact origins ("https://app.example.com"), LocalOrigins or "*"; empty turns
// CORS off (same-origin pages, the console among them, need none).
func cors(origins []string) func(http.Handler) http.Handler {
	any := slices.Contains(origins, "*")
	local := slices.Contains(origins, LocalOrigins)
	allowed := func(o string) bool { return any || slices.Contains(origins, o) || (local && isLocalOrigin(o)) }
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			origin := r.Header.Get("Origin")
			if origin == "" || len(origins) == 0 {
				next.ServeHTTP(w, r)
				return
			}
			h := w.Header()
			h.Add("Vary", "Origin")
			preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
			if !allowed(origin) {
				if preflight {
					oaierror.Write(w, oaierror.New(http.StatusForbidden, "invalid_request_error", "origin_not_allowed",
						"origin "+origin+" is not allowed; see server.cors_origins"))
					return
				}
				next.ServeHTTP(w, r) // the browser withholds the answer; other clients are unaffected
				return
			}
			if any {
				h.Set("Access-Control-Allow-Origin", "*")
			} else {
				h.Set("Access-Control-Allow-Origin", origin)
			}
			if !preflight {
				h.Set("Access-Control-Expose-Headers", corsExposed)
				next.ServeHTTP(w, r)
				return
			}
			h.Add("Vary", "Access-Control-Request-Method")
			h.Add("Vary", "Access-Control-Request-Headers")
			h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
			if rh := r.Header.Get("Access-Control-Request-Headers"); rh != "" {
				// Echoed: the SDKs add their own headers (X-OpenAI-Agents-SDK, OpenAI-Beta, x-stainless-*).
				h.Set("Access-Control-Allow-Headers", rh)
			}
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
		})
	}
}

// The keywords of server.cors_origins besides exact origins and "*".
const (
	// AutoOrigins, the default, is LocalOrigins when the server has no API key and none when
	// it has one: without a key any page the user visits could otherwise mint client secrets
	// and call chat on the user's local server (ollama's rule for a local server).
	AutoOrigins = "auto"
	// LocalOrigins are pages served from this machine: http(s) on localhost, 127.0.0.1 or
	// [::1], any port.
	LocalOrigins = "local"
)

// ResolveOrigins is the origin list of server.cors_origins: AutoOrigins resolved against
// whether an API key is set, otherwise SplitOrigins.
func ResolveOrigins(setting string, apiKey bool) []string {
	if strings.TrimSpace(setting) != AutoOrigins {
		return SplitOrigins(setting)
	}
	if apiKey {
		return nil
	}
	return []string{LocalOrigins}
}

// isLocalOrigin reports whether origin is a page on this machine (LocalOrigins).
func isLocalOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil || (u.Path != "" && u.Path != "/") {
		return false
	}
	switch u.Hostname() {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	return false
}

// SplitOrigins parses a comma-separated origin list (server.cors_origins), dropping blanks and
// a trailing slash, which browsers never send in Origin.
func SplitOrigins(s string) []string {
	var out []string
	for _, o := range strings.Split(s, ",") {
		if o = strings.TrimSuffix(strings.TrimSpace(o), "/"); o != "" {
			out = append(out, o)
		}
	}
	return out
}
