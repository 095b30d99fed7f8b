package api

import (
	"net/http"
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
// origins holds exact origins ("https://app.example.com") or "*"; empty turns CORS off.
func cors(origins []string) func(http.Handler) http.Handler {
	any := slices.Contains(origins, "*")
	allowed := func(o string) bool { return any || slices.Contains(origins, o) }
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
