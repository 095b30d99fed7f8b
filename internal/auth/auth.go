// Package auth checks the API key of an HTTP or WebSocket request, the one place where the
// server decides whether a client presented the configured key. Both the /v1 middleware and
// the realtime endpoint use it, so a key that one accepts the other accepts too.
package auth

import (
	"crypto/subtle"
	"net/http"
	"strings"
)

// WebSocketKeyProtocol prefixes the key in a Sec-WebSocket-Protocol entry: how browsers, which
// cannot set headers on a WebSocket, send the key to OpenAI's realtime API.
const WebSocketKeyProtocol = "openai-insecure-api-key."

// Result is the outcome of Check.
type Result int

// Check outcomes. Missing and Invalid are both 401s; they differ in the message a client gets.
const (
	OK      Result = iota
	Missing        // no Authorization header and no key sub-protocol
	Invalid        // a key was presented (or the header was malformed) and it is not the key
)

// Check compares the key presented by r with key in constant time. The key comes from
// "Authorization: <scheme> <key>" with the scheme Bearer in any case, or, without that header,
// from a Sec-WebSocket-Protocol entry "openai-insecure-api-key.<key>". An empty key accepts
// every request.
func Check(r *http.Request, key string) Result {
	if key == "" {
		return OK
	}
	got, ok := Presented(r)
	if !ok {
		return Missing
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(key)) != 1 {
		return Invalid
	}
	return OK
}

// Presented returns the key r presents (Authorization: Bearer, else the WebSocket key
// sub-protocol) and whether it presents one; a malformed Authorization header presents "".
func Presented(r *http.Request) (string, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok), true
		}
		return "", true // present but malformed: "incorrect", not "missing"
	}
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			if k, ok := strings.CutPrefix(strings.TrimSpace(p), WebSocketKeyProtocol); ok {
				return k, true
			}
		}
	}
	return "", false
}
