package test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/requestclient"
)

// These tests drive the real bin/omniserve, as a user or an orchestrator would.

var (
	buildOnce sync.Once
	buildErr  error
)

// omniserveBin returns bin/omniserve, building it with the Makefile (its cgo flags and header
// path, so the build cache is shared) when it is missing or older than any source it is built
// from, so the suite never tests a stale binary. `make test` builds it first.
func omniserveBin(t testing.TB) string {
	t.Helper()
	root := repoRoot(t)
	bin := filepath.Join(root, "bin", "omniserve")
	buildOnce.Do(func() {
		why := "missing"
		if st, err := os.Stat(bin); err == nil {
			src, err := newerSource(root, st.ModTime())
			if err != nil {
				buildErr = err
				return
			}
			if src == "" {
				return
			}
			why = "older than " + src
		}
		cmd := exec.Command("make", "-s", "build")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("make build (bin/omniserve %s): %w\n%s", why, err, out)
			return
		}
		// go build leaves an up-to-date binary untouched; mark it as checked.
		now := time.Now()
		buildErr = os.Chtimes(bin, now, now)
	})
	require.NoError(t, buildErr)
	return bin
}

// newerSource returns a file the binary is built from that changed after than ("" if none):
// the module files, the Makefile, and every non-test file under cmd/, internal/ and configs/
// (embedded assets included).
func newerSource(root string, than time.Time) (string, error) {
	newer := ""
	for _, f := range []string{"go.mod", "go.sum", "Makefile"} {
		if st, err := os.Stat(filepath.Join(root, f)); err == nil && st.ModTime().After(than) {
			return f, nil
		}
	}
	for _, dir := range []string{"cmd", "internal", "configs"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || newer != "" {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if strings.HasSuffix(path, "_test.go") {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			if info.ModTime().After(than) {
				newer, _ = filepath.Rel(root, path)
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("checking bin/omniserve against its sources: %w", err)
		}
		if newer != "" {
			return newer, nil
		}
	}
	return "", nil
}

// TestNewerSource: the staleness check sees a changed source file and ignores tests.
func TestNewerSource(t *testing.T) {
	root := t.TempDir()
	old := time.Now().Add(-time.Hour)
	for _, f := range []string{"go.mod", "cmd/m/main.go", "internal/x/x.go", "internal/x/x_test.go", "configs/a.yaml"} {
		p := filepath.Join(root, f)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, nil, 0o644))
		require.NoError(t, os.Chtimes(p, old, old))
	}
	built := time.Now().Add(-time.Minute)
	src, err := newerSource(root, built)
	require.NoError(t, err)
	require.Empty(t, src)
	now := time.Now()
	require.NoError(t, os.Chtimes(filepath.Join(root, "internal/x/x_test.go"), now, now))
	src, err = newerSource(root, built)
	require.NoError(t, err)
	require.Empty(t, src, "tests are not part of the binary")
	require.NoError(t, os.Chtimes(filepath.Join(root, "configs/a.yaml"), now, now))
	src, err = newerSource(root, built)
	require.NoError(t, err)
	require.Equal(t, filepath.Join("configs", "a.yaml"), src)
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// syncBuf collects a child's output for failure messages and log checks.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// binServer is one running bin/omniserve process.
type binServer struct {
	cmd  *exec.Cmd
	addr string
	logs *syncBuf
	done chan struct{} // closed when the process has exited and been reaped
	err  error         // Wait's result, read after done
}

// startBinary runs `bin/omniserve serve args...` from the repository root on a free loopback port
// and waits until /ready answers 200. The process is killed at cleanup if still running.
func startBinary(t *testing.T, args ...string) *binServer {
	t.Helper()
	return startBinaryEnv(t, nil, args...)
}

// startBinaryEnv is startBinary with extra environment variables (KEY=value), for the settings
// that have no flag.
func startBinaryEnv(t *testing.T, env []string, args ...string) *binServer {
	t.Helper()
	port := freePort(t)
	all := append([]string{"serve", "--host", "127.0.0.1", "--port", strconv.Itoa(port)}, args...)
	cmd := exec.Command(omniserveBin(t), all...)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(append(os.Environ(), "OMNISERVE_LOG_FORMAT=json"), env...)
	s := &binServer{cmd: cmd, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), logs: &syncBuf{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = s.logs, s.logs
	require.NoError(t, cmd.Start())
	go func() { s.err = cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			_ = cmd.Process.Kill()
			<-s.done
		}
		// Every turn has one owner that closes it exactly once: a turn recorded without its
		// owner's close is a bug, whatever the test was about.
		if strings.Contains(s.logs.String(), requestclient.UnclosedTurnsMessage) {
			t.Errorf("omniserve recorded turns its session never closed:\n%s", s.logs.String())
		}
	})
	deadline := time.Now().Add(2 * time.Minute) // a cold dummy-model generation included
	for {
		select {
		case <-s.done:
			t.Fatalf("omniserve exited before ready: %v\n%s", s.err, s.logs.String())
		default:
		}
		if code, _ := s.get(t, "/ready"); code == http.StatusOK {
			return s
		}
		require.True(t, time.Now().Before(deadline), "not ready in time:\n%s", s.logs.String())
		time.Sleep(50 * time.Millisecond)
	}
}

// get returns the status and body of GET path, or 0 when the server cannot be reached.
func (s *binServer) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + s.addr + path)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// exitCode waits for the process to exit, up to timeout.
func (s *binServer) exitCode(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(timeout):
		t.Fatalf("omniserve did not exit within %s\n%s", timeout, s.logs.String())
	}
	if s.err == nil {
		return 0
	}
	var ee *exec.ExitError
	require.ErrorAs(t, s.err, &ee)
	return ee.ExitCode()
}

func TestBinaryBadConfigExits2(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("server:\n  port: 8000\n  colour: blue\n"), 0o600))
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing config", []string{"serve", "--config", "/nonexistent/omni.yaml"}, "/nonexistent/omni.yaml: config file not found"},
		{"unknown key", []string{"serve", "--config", bad}, `unknown key "server.colour"`},
		{"bad flag value", []string{"serve", "--log-format", "xml"}, `invalid server.log_format "xml"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(omniserveBin(t), tt.args...)
			cmd.Dir = repoRoot(t)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, 2, ee.ExitCode())
			require.Equal(t, 1, bytes.Count(stderr.Bytes(), []byte("\n")), stderr.String())
			require.Contains(t, stderr.String(), tt.want)
		})
	}
}

func TestBinaryVersion(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(omniserveBin(t), "version").Output()
	require.NoError(t, err)
	require.Contains(t, string(out), "omniserve ")
	require.Contains(t, string(out), "backends: ")
	require.Contains(t, string(out), runtime.Version())
}

// TestBinaryServeAndGracefulShutdown runs `serve` with the default config, checks the endpoints
// a user calls first, then sends SIGTERM while a chat request is in flight (its body half sent):
// the request completes, /ready answers 503 and new requests are refused while probes still
// answer, and the exit code is 0.
func TestBinaryServeAndGracefulShutdown(t *testing.T) {
	t.Parallel()
	const shutdownTimeout = 10 * time.Second
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--shutdown-timeout", shutdownTimeout.String())

	code, _ := s.get(t, "/health")
	require.Equal(t, http.StatusOK, code)
	code, body := s.get(t, "/v1/models")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), `"object":"list"`)
	require.Contains(t, string(body), `"id":"dummy"`)

	// net/http drops a request whose headers arrive after Shutdown began, so the in-flight
	// request is one whose handler already runs: a chat completion still reading its body.
	chatBody := `{"model":"dummy","messages":[{"role":"user","content":"hello there"}],"max_tokens":4}`
	probe, err := http.Post("http://"+s.addr+"/v1/chat/completions", "application/json", strings.NewReader(chatBody)) //nolint:noctx // bounded by the server under test
	require.NoError(t, err)
	probe.Body.Close()
	require.Equal(t, http.StatusOK, probe.StatusCode, "chat must be served by the default config")
	conn, err := net.Dial("tcp", s.addr)
	require.NoError(t, err)
	defer conn.Close()
	half := len(chatBody) / 2
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: omniserve\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(chatBody), chatBody[:half])
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond) // let the handler start reading

	signalled := time.Now()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	// Draining: the listener stays up for probes, /ready answers 503, new work is refused.
	require.Eventually(t, func() bool {
		code, _ := s.get(t, "/ready")
		return code == http.StatusServiceUnavailable
	}, 3*time.Second, 10*time.Millisecond, "/ready must answer 503 while draining")
	code, _ = s.get(t, "/health")
	require.Equal(t, http.StatusOK, code, "probes still answer while draining")
	refused, err := http.Post("http://"+s.addr+"/v1/chat/completions", "application/json", strings.NewReader(chatBody)) //nolint:noctx // bounded by the server under test
	require.NoError(t, err)
	refusedBody, _ := io.ReadAll(refused.Body)
	refused.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, refused.StatusCode)
	require.Contains(t, string(refusedBody), "shutting_down")

	_, err = io.WriteString(conn, chatBody[half:])
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(shutdownTimeout)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, s.logs.String())
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "in-flight request must complete: %s", b)
	require.Contains(t, string(b), `"chat.completion"`)

	require.Equal(t, 0, s.exitCode(t, shutdownTimeout+5*time.Second), s.logs.String())
	require.Less(t, time.Since(signalled), shutdownTimeout)
	logs := s.logs.String()
	for _, phase := range []string{"shutdown: signal received", "shutdown: draining in-flight requests", "shutdown: drained",
		"shutdown: closed engine", "shutdown: complete"} {
		require.Contains(t, logs, phase)
	}
}
