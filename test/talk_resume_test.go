package test

import (
	"bytes"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// cutProxy relays TCP connections to a server and, once armed, cuts the next connection that
// carries the marker from the server, both sides, without a close frame: a network that drops
// mid-reply. One arming, one cut.
type cutProxy struct {
	ln     net.Listener
	target string
	marker []byte
	conns  atomic.Int32
	armed  atomic.Bool
	cut    atomic.Bool
	wg     sync.WaitGroup
}

func startCutProxy(t *testing.T, target, marker string, armed bool) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, target: target, marker: []byte(marker)}
	p.armed.Store(armed)
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.conns.Add(1)
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.relay(c) }()
	}
}

func (p *cutProxy) relay(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); done <- struct{}{} }()
	go func() {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		var tail []byte // the marker may straddle two reads
		for {
			n, err := server.Read(buf)
			if n > 0 {
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
				if p.armed.Load() {
					tail = append(tail, buf[:n]...)
					if bytes.Contains(tail, p.marker) && p.armed.CompareAndSwap(true, false) {
						p.cut.Store(true)
						// Abrupt on both sides: the client sees the TCP connection end, the
						// server a dropped client (no close frame either way).
						_ = client.(*net.TCPConn).SetLinger(0)
						return
					}
					if len(tail) > len(p.marker) {
						tail = tail[len(tail)-len(p.marker):]
					}
				}
			}
			if err != nil {
				return
			}
		}
	}()
	<-done
}

// TestTalkResumesADroppedConnection: `omniserve talk` loses its connection mid-reply (a proxy
// cuts it at the first assistant audio) and resumes the same session: the reply goes on, every
// event once, one turn, and the server logs the resume rather than a new session.
func TestTalkResumesADroppedConnection(t *testing.T) {
	t.Parallel()
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--max-sessions", "1",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	p := startCutProxy(t, s.addr, `"type":"response.output_audio.delta"`, true)
	wav := speechWAV(t, 0, 0)
	r := talk(t, nil, "--url", "ws://"+p.ln.Addr().String()+"/v1/realtime", "--in", wav, "--pace", "fast", "--max-tokens", "24")
	require.True(t, p.cut.Load(), "the proxy cut the first connection")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, regexp.MustCompile(`(?m)^connection lost: resumed session \S+ \(\d+ events replayed\)$`), r.stdout)
	require.NotContains(t, r.stdout, "starting a new session")
	require.Equal(t, int32(2), p.conns.Load(), "one resume connection, no new session")
	turns := turnLineRe.FindAllStringSubmatch(r.stdout, -1)
	require.Len(t, turns, 1, "the cut reply is one turn")
	require.Contains(t, []string{"completed", "incomplete"}, turns[0][2], "the reply went on to its end")
	require.Contains(t, strings.ToLower(youRe.FindStringSubmatch(r.stdout)[1]), "forward")
	require.Contains(t, s.logs.String(), "session resumed")
}

// TestTalkStartsANewSessionWhenTheServerLostIt: the server keeps a dropped session for less time
// than talk takes to redial, so the resume is answered session_not_found; only then does talk
// start a new session, and has the conversation again on it.
func TestTalkStartsANewSessionWhenTheServerLostIt(t *testing.T) {
	t.Parallel()
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--max-sessions", "1",
		"--resume-grace", "50ms", "--cache-dir", filepath.Join(t.TempDir(), "cache"))
	p := startCutProxy(t, s.addr, `"type":"response.output_audio.delta"`, true)
	wav := speechWAV(t, 0, 0)
	r := talk(t, nil, "--url", "ws://"+p.ln.Addr().String()+"/v1/realtime", "--in", wav, "--pace", "fast", "--max-tokens", "12")
	require.True(t, p.cut.Load(), "the proxy cut the first connection")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "starting a new session")
	require.Contains(t, r.stdout, "session_not_found")
	require.NotContains(t, r.stdout, "connection lost: resumed")
	// The cut connection, the refused resume, the new session.
	require.Equal(t, int32(3), p.conns.Load())
	turns := turnLineRe.FindAllStringSubmatch(r.stdout, -1)
	require.NotEmpty(t, turns)
	require.Contains(t, []string{"completed", "incomplete"}, turns[len(turns)-1][2], "the new session answered")
	require.Contains(t, s.logs.String(), "resume grace expired")
}
