package api

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/omniserve/omniserve/internal/oaierror"
)

// Bounds on a WebRTC offer (POST /v1/realtime/calls, and GPT-Live's POST /v1/live/sessions,
// whose JSON body is bounded as a multipart offer), checked before anything parses it: a real
// offer is a few KB, while the router's body bound (64 MiB, for chat's base64 audio) let one
// offer cost 19 s of CPU and 1.8 GB of RSS in the SDP parser before the call was refused.
const (
	// MaxOfferBytes bounds an application/sdp offer.
	MaxOfferBytes = 64 << 10
	// MaxCallFormBytes bounds a multipart/form-data offer: the SDP and the session of the call
	// (instructions up to server.max_instructions_bytes, tools).
	MaxCallFormBytes = 1 << 20
)

// guardCallOffer answers 413 to an offer over its bound without reading more than the bound
// (at once when Content-Length says so), and hands a smaller one on unchanged.
func guardCallOffer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit, param := int64(MaxCallFormBytes), ""
		if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && ct == "application/sdp" {
			limit, param = MaxOfferBytes, "sdp"
		}
		tooLarge := &oaierror.Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
			Param: param, Message: fmt.Sprintf("the offer exceeds the limit of %d bytes", limit)}
		if r.ContentLength > limit {
			w.Header().Set("Connection", "close") // the rest of the body is not read
			oaierror.Write(w, tooLarge)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
		if err != nil {
			oaierror.Write(w, bodyError(err, limit, "reading the offer"))
			return
		}
		if int64(len(body)) > limit {
			w.Header().Set("Connection", "close")
			oaierror.Write(w, tooLarge)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}
