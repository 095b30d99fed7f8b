// Package console serves omniserve's browser console: one static page (HTML, CSS, JavaScript
// and the AudioWorklet) embedded in the binary, no build step and no CDN, so it works offline.
// The page itself needs no API key; the WebSocket it opens does.
package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// csp keeps the page to its own scripts; connect-src is open because the page may talk to
// another server's realtime endpoint (its URL field).
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"media-src 'self' blob:; connect-src 'self' ws: wss: http: https:; base-uri 'none'; frame-ancestors 'none'"

// Handler serves the console: GET / is the page, GET /console/<file> its assets.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	files := http.FileServerFS(sub)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		setHeaders(w)
		http.ServeFileFS(w, r, sub, "index.html")
	})
	mux.Handle("GET /console/", http.StripPrefix("/console", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setHeaders(w)
		files.ServeHTTP(w, r)
	})))
	return mux
}

func setHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	// The microphone is the point of the page; nothing else is.
	h.Set("Permissions-Policy", "microphone=(self), camera=(), geolocation=()")
	h.Set("Cache-Control", "no-cache")
}
