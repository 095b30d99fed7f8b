// Package otlpreceiver is a real OTLP/HTTP trace receiver on loopback: it accepts what an
// OpenTelemetry exporter posts to /v1/traces (protobuf, gzip or not), decodes it with the OTLP
// protobuf definitions and keeps the spans. `omniserve bench realtime` points a traced server at
// one, so the tracing overhead it measures includes a real export over a real socket.
package otlpreceiver

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// maxBody bounds one export request (the SDK's batches are far smaller).
const maxBody = 32 << 20

// Receiver is a running receiver. Close stops it.
type Receiver struct {
	srv  *http.Server
	addr string
	keep int
	done chan struct{}

	mu     sync.Mutex
	spans  []*tracepb.Span
	count  int
	byName map[string]int // spans received per name (span names are few: they name kinds)
}

// Start listens on a free loopback port and serves until Close. It keeps the first keep spans
// (Spans) and counts all of them (Count), so a long run's memory stays bounded.
func Start(keep int) (*Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("otlp receiver: %w", err)
	}
	r := &Receiver{addr: ln.Addr().String(), keep: keep, done: make(chan struct{}), byName: map[string]int{}}
	r.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(r.export)}
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(ln) // ErrServerClosed after Close
	}()
	return r, nil
}

// Endpoint is the base URL an OTLP/HTTP exporter is given (it posts to Endpoint()+"/v1/traces").
func (r *Receiver) Endpoint() string { return "http://" + r.addr }

// Count is the number of spans received so far.
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// CountNamed is the number of spans named name received so far (kept or not).
func (r *Receiver) CountNamed(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byName[name]
}

// Spans returns a copy of the spans kept so far.
func (r *Receiver) Spans() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// Close stops the listener, ends the open requests and waits for the server goroutine.
func (r *Receiver) Close() error {
	err := r.srv.Close()
	<-r.done
	return err
}

func (r *Receiver) export(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost {
		http.Error(w, "POST /v1/traces only", http.StatusNotFound)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, req.Body, maxBody)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, "gzip: "+err.Error(), http.StatusBadRequest)
			return
		}
		body = io.LimitReader(zr, maxBody)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var ex collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &ex); err != nil {
		http.Error(w, "not an OTLP ExportTraceServiceRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range ex.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.count += len(ss.GetSpans())
			for _, sp := range ss.GetSpans() {
				r.byName[sp.GetName()]++
			}
			if n := r.keep - len(r.spans); n > 0 {
				r.spans = append(r.spans, ss.GetSpans()[:min(n, len(ss.GetSpans()))]...)
			}
		}
	}
	r.mu.Unlock()
	out, err := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}
